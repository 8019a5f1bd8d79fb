import type { Geometry } from '../../../shared/features/schema.js';
import type { Basemap } from '../basemaps.js';

/** A feature as the API returns it. */
export interface Feature {
  type: 'Feature';
  id: string;
  geometry: Geometry;
  properties: {
    name: string;
    kategorie: string;
    adresse?: string | null;
    telefon?: string | null;
    status?: string;
    version?: number;
    createdBy?: string;
    createdAt?: string;
    updatedBy?: string;
    updatedAt?: string;
  };
}

export interface FeatureCollection {
  type: 'FeatureCollection';
  features: Feature[];
  links: Array<{ rel: string; href: string }>;
}

export interface HistoryEntry {
  version: number;
  operation: 'insert' | 'update' | 'delete';
  actor: string;
  recordedAt: string;
  /** Why the version was made (X-Edit-Note), e.g. how an offline edit was merged. */
  note?: string | null;
  feature: Feature;
}

/** What the server hands the browser islands: runtime configuration, never baked into the build. */
export interface ClientConfig {
  lang: 'de' | 'en';
  apiUrl: string;
  /** The background maps of the switcher (config/basemaps.yaml), the default first. */
  basemaps: Basemap[];
  wms: { url: string; layers: string } | undefined;
  /** The place search's geocoder (Nominatim-compatible); undefined: no place search. */
  geocoder: { url: string; attribution: string } | undefined;
  /** Development sign-in only; with Kratos the session cookie travels instead. */
  token: string | undefined;
  user: { id: string; role: string } | undefined;
}

/** The user-editable attributes, in form order. */
export const EDITABLE_FIELDS = ['name', 'kategorie', 'adresse', 'telefon'] as const;
export type EditableField = (typeof EDITABLE_FIELDS)[number];
