import { createHash } from 'node:crypto';

/**
 * One SLD 1.0.0 style per feature kategorie, plus the layer's default style that combines them.
 *
 * A feature's geometry may be a point, a line or a polygon (the column is geometry(Geometry, 4326)),
 * so every kategorie has three rules selected with the `dimension()` filter function.
 *
 * GeoServer re-encodes an uploaded SLD, so comparing text would report a change on every run. Each
 * style instead carries a revision (hash of what this module renders) in its UserStyle abstract,
 * which survives re-encoding; provisioning compares revisions.
 */

export interface KategorieStyle {
  kategorie: string;
  title: string;
  fill: string;
  stroke: string;
}

/** The feature kinds of the platform (services/api: friedhof, blumenbeet, denkmal). */
export const KATEGORIE_STYLES: readonly KategorieStyle[] = [
  { kategorie: 'friedhof', title: 'Friedhof', fill: '#6b8f71', stroke: '#2f4f35' },
  { kategorie: 'blumenbeet', title: 'Blumenbeet', fill: '#e07a5f', stroke: '#8c3b26' },
  { kategorie: 'denkmal', title: 'Denkmal', fill: '#3d5a80', stroke: '#1d2d44' },
];

export const REVISION_PREFIX = 'geodata-provisioning revision ';

export interface RenderedStyle {
  name: string;
  sld: string;
  revision: string;
}

const escapeXml = (text: string) => text.replace(/[<>&'"]/g, (c) => `&#${c.charCodeAt(0)};`);

function kategorieRules(style: KategorieStyle, geometryProperty: string): string {
  const filter = (dimension: number) => `
          <ogc:Filter>
            <ogc:And>
              <ogc:PropertyIsEqualTo>
                <ogc:PropertyName>kategorie</ogc:PropertyName>
                <ogc:Literal>${escapeXml(style.kategorie)}</ogc:Literal>
              </ogc:PropertyIsEqualTo>
              <ogc:PropertyIsEqualTo>
                <ogc:Function name="dimension"><ogc:PropertyName>${escapeXml(geometryProperty)}</ogc:PropertyName></ogc:Function>
                <ogc:Literal>${dimension}</ogc:Literal>
              </ogc:PropertyIsEqualTo>
            </ogc:And>
          </ogc:Filter>`;
  return `
        <Rule>
          <Name>${escapeXml(style.kategorie)}-polygon</Name>
          <Title>${escapeXml(style.title)}</Title>${filter(2)}
          <PolygonSymbolizer>
            <Fill><CssParameter name="fill">${style.fill}</CssParameter><CssParameter name="fill-opacity">0.6</CssParameter></Fill>
            <Stroke><CssParameter name="stroke">${style.stroke}</CssParameter><CssParameter name="stroke-width">1</CssParameter></Stroke>
          </PolygonSymbolizer>
        </Rule>
        <Rule>
          <Name>${escapeXml(style.kategorie)}-line</Name>
          <Title>${escapeXml(style.title)}</Title>${filter(1)}
          <LineSymbolizer>
            <Stroke><CssParameter name="stroke">${style.stroke}</CssParameter><CssParameter name="stroke-width">2</CssParameter></Stroke>
          </LineSymbolizer>
        </Rule>
        <Rule>
          <Name>${escapeXml(style.kategorie)}-point</Name>
          <Title>${escapeXml(style.title)}</Title>${filter(0)}
          <PointSymbolizer>
            <Graphic>
              <Mark>
                <WellKnownName>circle</WellKnownName>
                <Fill><CssParameter name="fill">${style.fill}</CssParameter></Fill>
                <Stroke><CssParameter name="stroke">${style.stroke}</CssParameter></Stroke>
              </Mark>
              <Size>10</Size>
            </Graphic>
          </PointSymbolizer>
        </Rule>`;
}

function document(name: string, title: string, rules: string): RenderedStyle {
  const body = (revision: string) => `<?xml version="1.0" encoding="UTF-8"?>
<StyledLayerDescriptor version="1.0.0"
    xmlns="http://www.opengis.net/sld" xmlns:ogc="http://www.opengis.net/ogc"
    xmlns:xlink="http://www.w3.org/1999/xlink" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
    xsi:schemaLocation="http://www.opengis.net/sld http://schemas.opengis.net/sld/1.0.0/StyledLayerDescriptor.xsd">
  <NamedLayer>
    <Name>${escapeXml(name)}</Name>
    <UserStyle>
      <Name>${escapeXml(name)}</Name>
      <Title>${escapeXml(title)}</Title>
      <Abstract>${REVISION_PREFIX}${revision}</Abstract>
      <FeatureTypeStyle>${rules}
      </FeatureTypeStyle>
    </UserStyle>
  </NamedLayer>
</StyledLayerDescriptor>
`;
  const revision = createHash('sha256').update(body('')).digest('hex').slice(0, 16);
  return { name, sld: body(revision), revision };
}

export function styleNameOf(layerName: string, kategorie: string): string {
  return `${layerName}-${kategorie}`;
}

/** One style per kategorie and the combined default style (named `<layer>-default`). */
export function renderStyles(layerName: string, geometryProperty: string, styles: readonly KategorieStyle[] = KATEGORIE_STYLES): { perKategorie: RenderedStyle[]; combined: RenderedStyle } {
  const perKategorie = styles.map((s) => document(styleNameOf(layerName, s.kategorie), s.title, kategorieRules(s, geometryProperty)));
  const combined = document(`${layerName}-default`, 'Alle Kategorien', styles.map((s) => kategorieRules(s, geometryProperty)).join(''));
  return { perKategorie, combined };
}

/** The revision a style on the server carries, or undefined for a style this module did not write. */
export function revisionOf(sld: string): string | undefined {
  const match = new RegExp(`${REVISION_PREFIX}([0-9a-f]{16})`).exec(sld);
  return match?.[1];
}
