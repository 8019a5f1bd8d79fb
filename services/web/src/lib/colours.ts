/** Kategorie colours, shared by the map styles and the legend (server-rendered, so not from map.ts). */
export const KATEGORIE_COLOURS: Record<string, string> = { friedhof: '#1b5e20', blumenbeet: '#ad1457', denkmal: '#4527a0' };
