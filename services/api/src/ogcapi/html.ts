/**
 * The HTML encoding of /ogcapi (Part 1 /conf/html): plain server-rendered pages for people who open the
 * service in a browser. Every value is escaped; no script, no external resource.
 */

export interface Link {
  rel: string;
  href: string;
  type?: string;
  title?: string;
}

const escapeHtml = (value: unknown): string =>
  String(value ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);

function page(title: string, breadcrumbs: Link[], body: string): string {
  const trail = breadcrumbs.map((b) => `<a href="${escapeHtml(b.href)}">${escapeHtml(b.title ?? b.rel)}</a>`).join(' › ');
  return `<!doctype html>
<html lang="de">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${escapeHtml(title)}</title>
<style>
body{font-family:system-ui,sans-serif;margin:1.5rem auto;max-width:70rem;padding:0 1rem;line-height:1.45;color:#1b1b1b}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:.3rem .5rem;text-align:left;vertical-align:top}
code,pre{background:#f4f4f4;padding:.1rem .3rem;border-radius:3px}pre{padding:.6rem;overflow:auto}
nav{margin-bottom:1rem}a{color:#0645ad}
</style>
</head>
<body>
<nav aria-label="Brotkrumen">${trail}</nav>
<main>
<h1>${escapeHtml(title)}</h1>
${body}
</main>
</body>
</html>`;
}

function linkList(links: Link[], label = 'Links'): string {
  const items = links.map((l) => `<li><a href="${escapeHtml(l.href)}">${escapeHtml(l.title ?? l.rel)}</a> <small>(${escapeHtml(l.rel)}${l.type ? `, ${escapeHtml(l.type)}` : ''})</small></li>`);
  return `<section aria-label="${escapeHtml(label)}"><h2>${escapeHtml(label)}</h2><ul>${items.join('')}</ul></section>`;
}

export function landingHtml(doc: { title: string; description: string; links: Link[] }, home: Link): string {
  return page(doc.title, [home], `<p>${escapeHtml(doc.description)}</p>${linkList(doc.links)}`);
}

export function conformanceHtml(conformsTo: readonly string[], home: Link): string {
  return page('Konformitätsklassen', [home], `<ul>${conformsTo.map((c) => `<li><code>${escapeHtml(c)}</code></li>`).join('')}</ul>`);
}

export interface CollectionView {
  id: string;
  title: string;
  description: string;
  links: Link[];
  crs: readonly string[];
}

export function collectionsHtml(collections: CollectionView[], home: Link): string {
  const rows = collections.map((c) => {
    const items = c.links.find((l) => l.rel === 'items' && l.type === 'text/html');
    const self = c.links.find((l) => l.rel === 'self');
    return `<tr><td><a href="${escapeHtml(self?.href)}">${escapeHtml(c.title)}</a></td><td>${escapeHtml(c.description)}</td><td><a href="${escapeHtml(items?.href)}">Features</a></td></tr>`;
  });
  return page('Sammlungen', [home], `<table><caption>Sammlungen</caption><thead><tr><th scope="col">Sammlung</th><th scope="col">Beschreibung</th><th scope="col">Inhalt</th></tr></thead><tbody>${rows.join('')}</tbody></table>`);
}

export function collectionHtml(c: CollectionView, home: Link, collections: Link): string {
  const crs = `<h2>Koordinatenreferenzsysteme</h2><ul>${c.crs.map((u) => `<li><code>${escapeHtml(u)}</code></li>`).join('')}</ul>`;
  return page(c.title, [home, collections], `<p>${escapeHtml(c.description)}</p>${linkList(c.links)}${crs}`);
}

interface FeatureView {
  id: string;
  geometry: { type: string } | null;
  properties: Record<string, unknown>;
}

export function itemsHtml(title: string, features: FeatureView[], links: Link[], itemHref: (id: string) => string, trail: Link[]): string {
  const rows = features.map((f) => {
    const p = f.properties;
    return `<tr><td><a href="${escapeHtml(itemHref(f.id))}">${escapeHtml(p.name)}</a></td><td>${escapeHtml(p.kategorie)}</td><td>${escapeHtml(p.status)}</td><td>${escapeHtml(p.version)}</td><td>${escapeHtml(p.updatedAt)}</td><td>${escapeHtml(f.geometry?.type)}</td></tr>`;
  });
  const paging = links.filter((l) => l.rel === 'prev' || l.rel === 'next').map((l) => `<a href="${escapeHtml(l.href)}" rel="${escapeHtml(l.rel)}">${l.rel === 'next' ? 'Nächste Seite' : 'Vorige Seite'}</a>`);
  const table = `<table><caption>${features.length} Features auf dieser Seite</caption><thead><tr><th scope="col">Name</th><th scope="col">Kategorie</th><th scope="col">Status</th><th scope="col">Version</th><th scope="col">Geändert</th><th scope="col">Geometrie</th></tr></thead><tbody>${rows.join('')}</tbody></table>`;
  return page(title, trail, `${table}<nav aria-label="Seiten">${paging.join(' · ')}</nav>${linkList(links.filter((l) => l.rel !== 'prev' && l.rel !== 'next'))}`);
}

export function itemHtml(feature: FeatureView, links: Link[], trail: Link[]): string {
  const rows = Object.entries(feature.properties).map(([k, v]) => `<tr><th scope="row">${escapeHtml(k)}</th><td>${escapeHtml(v)}</td></tr>`);
  const body = `<table><caption>Eigenschaften</caption><tbody><tr><th scope="row">id</th><td>${escapeHtml(feature.id)}</td></tr>${rows.join('')}</tbody></table>
<h2>Geometrie</h2><pre>${escapeHtml(JSON.stringify(feature.geometry))}</pre>${linkList(links)}`;
  return page(String(feature.properties.name ?? feature.id), trail, body);
}
