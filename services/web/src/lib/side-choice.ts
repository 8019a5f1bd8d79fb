/**
 * The "mine or theirs" choice of one field in a conflict, shared by the editor's conflict view (after
 * a 412 online) and the offline merge view: a fieldset whose (visually hidden) legend names the
 * field, and one radio per side, mine preselected so nothing typed is lost.
 *
 * Each radio carries its accessible name itself, "<field>: <side>" (e.g. "Adresse: Server"), so a
 * screen reader announces which field a choice belongs to even when the table around it is not read;
 * the visible text beside it is just the side. (The two copies this replaces put that name on the
 * radio in one place and on its label in the other.)
 */
export interface SideChoiceOptions {
  /** The radio group's form name, read back with FormData. */
  name: string;
  /** The field's visible label, e.g. "Adresse". */
  field: string;
  /** The legend, e.g. "Wert für Adresse". */
  legend: string;
  /** The words for each side in this view ("Meine"/"Deren" in the editor, "Meine Änderung"/"Server" offline). */
  mine: string;
  theirs: string;
}

export type Side = 'mine' | 'theirs';

export function sideChoice(options: SideChoiceOptions): HTMLFieldSetElement {
  const group = document.createElement('fieldset');
  const legend = document.createElement('legend');
  legend.className = 'visually-hidden';
  legend.textContent = options.legend;
  group.append(legend);
  for (const side of ['mine', 'theirs'] as const) {
    const words = side === 'mine' ? options.mine : options.theirs;
    const option = document.createElement('label');
    const radio = document.createElement('input');
    radio.type = 'radio';
    radio.name = options.name;
    radio.value = side;
    radio.checked = side === 'mine';
    // The page's input style is for text fields (full width, 44 px high); a radio keeps its own size.
    radio.style.width = 'auto';
    radio.style.minHeight = '0';
    radio.setAttribute('aria-label', `${options.field}: ${words}`);
    option.append(radio, ` ${words}`);
    group.append(option);
  }
  return group;
}
