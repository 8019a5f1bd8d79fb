import { AppError } from '../../../shared/errors.js';

/**
 * CQL2 (OGC 21-065r2) for the `filter` parameter of OGC API – Features Part 3: the text and the JSON
 * encoding parsed into one small syntax tree, which sql.ts turns into parameterised SQL.
 *
 * Why our own parser: the one maintained CQL2 library on npm, cql2-wasm (developmentseed/cql2-rs), is a
 * release candidate (0.5.0-rc1) whose text parser silently drops what it cannot read —
 * `kategorie = = 'x'` parses as the bare property `kategorie`, `name = 'O''Brien'` as `name = 'O'` —
 * and its validate() accepts an unknown operator. A filter that means something else than was sent is
 * worse than a refusal, so this grammar refuses anything it does not fully consume, with the position.
 *
 * Supported (the conformance classes declared in conformance.ts):
 * - Basic CQL2: AND, OR, NOT, = <> < <= > >=, IS [NOT] NULL, string/number/boolean literals,
 *   TIMESTAMP('…') and DATE('…') literals, parentheses;
 * - Advanced comparison operators: [NOT] LIKE, [NOT] BETWEEN, [NOT] IN (…);
 * - Case-insensitive comparison: CASEI(a property or a string), in any comparison, LIKE and IN (Unicode
 *   lower case on both sides, PostgreSQL's lower());
 * - Basic spatial functions (plus): S_INTERSECTS with BBOX(…) or a WKT POINT, LINESTRING, POLYGON,
 *   MULTIPOINT, MULTILINESTRING or MULTIPOLYGON (and their GeoJSON form in CQL2 JSON).
 */

export type Scalar =
  | { kind: 'property'; name: string }
  | { kind: 'string'; value: string }
  | { kind: 'number'; value: number }
  | { kind: 'boolean'; value: boolean }
  | { kind: 'timestamp'; value: string }
  | { kind: 'date'; value: string }
  /** CASEI(…) of a property or a string (not of another function: the argument is one level deep). */
  | { kind: 'casei'; arg: { kind: 'property'; name: string } | { kind: 'string'; value: string } };

export type SpatialOperand = { kind: 'property'; name: string } | { kind: 'bbox'; coords: number[] } | { kind: 'geometry'; geometry: GeoJsonGeometry };

export interface GeoJsonGeometry {
  type: 'Point' | 'LineString' | 'Polygon' | 'MultiPoint' | 'MultiLineString' | 'MultiPolygon';
  coordinates: unknown;
}

export type ComparisonOp = '=' | '<>' | '<' | '<=' | '>' | '>=';

export type Expr =
  | { kind: 'and' | 'or'; args: Expr[] }
  | { kind: 'not'; arg: Expr }
  | { kind: 'literal'; value: boolean }
  | { kind: 'compare'; op: ComparisonOp; left: Scalar; right: Scalar }
  | { kind: 'like'; value: Scalar; pattern: Scalar }
  | { kind: 'between'; value: Scalar; low: Scalar; high: Scalar }
  | { kind: 'in'; value: Scalar; list: Scalar[] }
  | { kind: 'isNull'; value: Scalar }
  | { kind: 's_intersects'; left: SpatialOperand; right: SpatialOperand };

/**
 * Hard limits so a filter cannot make the parser or the database work without bound (documented in
 * docs/ogcapi.md and the filter parameter of /ogcapi/api). The parser recurses once per level of
 * parentheses, NOT, AND/OR or JSON "op" object, and counts the levels: the 65th is a 400 naming the
 * limit, long before the stack could run out (a 16 KiB URL holds about 8 000 parentheses). Every
 * pattern of the tokenizer is anchored at the current position and matches one way only, so the scan
 * is linear in the length of the filter, which is checked first.
 */
export const MAX_FILTER_LENGTH = 20_000;
export const MAX_FILTER_DEPTH = 64;
const MAX_DEPTH = MAX_FILTER_DEPTH;

/** A refused filter: 400 INVALID_FILTER naming where the problem is (a character offset or a JSON path). */
export function filterError(message: string, where: { position?: number; path?: string }, cause?: unknown): AppError {
  const at = where.position !== undefined ? ` at position ${where.position}` : where.path !== undefined ? ` at ${where.path || '/'}` : '';
  return new AppError('INVALID_FILTER', `invalid filter${at}: ${message}`, {
    statusCode: 400,
    fields: [{ field: where.path !== undefined ? `filter${where.path}` : where.position !== undefined ? `filter@${where.position}` : 'filter', message }],
    ...(cause === undefined ? {} : { cause }),
  });
}

// --- CQL2 text -------------------------------------------------------------------------------

type Token =
  | { type: 'word'; text: string; upper: string; pos: number; quoted: boolean }
  | { type: 'string'; text: string; pos: number }
  | { type: 'number'; value: number; text: string; pos: number }
  | { type: 'op'; text: string; pos: number }
  | { type: 'end'; pos: number };

function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const c = source[i]!;
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const start = i;
    if (c === "'") {
      let text = '';
      i++;
      for (;;) {
        if (i >= source.length) throw filterError('unterminated string literal', { position: start });
        if (source[i] === "'") {
          if (source[i + 1] === "'") {
            text += "'";
            i += 2;
            continue;
          }
          i++;
          break;
        }
        text += source[i];
        i++;
      }
      // PostgreSQL text cannot hold U+0000: refused here rather than by the database.
      if (text.includes('\u0000')) throw filterError('a string must not contain NUL characters', { position: start });
      tokens.push({ type: 'string', text, pos: start });
      continue;
    }
    if (c === '"') {
      const end = source.indexOf('"', i + 1);
      if (end < 0) throw filterError('unterminated quoted property name', { position: start });
      const text = source.slice(i + 1, end);
      if (text.length === 0) throw filterError('empty property name', { position: start });
      tokens.push({ type: 'word', text, upper: '', pos: start, quoted: true });
      i = end + 1;
      continue;
    }
    const number = /^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?/.exec(source.slice(i));
    if (number) {
      tokens.push({ type: 'number', value: Number(number[0]), text: number[0], pos: start });
      i += number[0].length;
      continue;
    }
    const word = /^[A-Za-z_][A-Za-z0-9_.:]*/.exec(source.slice(i));
    if (word) {
      tokens.push({ type: 'word', text: word[0], upper: word[0].toUpperCase(), pos: start, quoted: false });
      i += word[0].length;
      continue;
    }
    const op = /^(?:<>|<=|>=|[=<>(),+-])/.exec(source.slice(i));
    if (op) {
      tokens.push({ type: 'op', text: op[0], pos: start });
      i += op[0].length;
      continue;
    }
    throw filterError(`unexpected character ${JSON.stringify(c)}`, { position: start });
  }
  tokens.push({ type: 'end', pos: source.length });
  return tokens;
}

const COMPARISON_OPS = new Set(['=', '<>', '<', '<=', '>', '>=']);
const RESERVED = new Set(['AND', 'OR', 'NOT', 'IS', 'NULL', 'LIKE', 'BETWEEN', 'IN', 'TRUE', 'FALSE']);
const WKT_TYPES: Record<string, GeoJsonGeometry['type']> = {
  POINT: 'Point',
  LINESTRING: 'LineString',
  POLYGON: 'Polygon',
  MULTIPOINT: 'MultiPoint',
  MULTILINESTRING: 'MultiLineString',
  MULTIPOLYGON: 'MultiPolygon',
};

export function parseCql2Text(source: string): Expr {
  if (source.length > MAX_FILTER_LENGTH) throw filterError(`longer than ${MAX_FILTER_LENGTH} characters`, { position: MAX_FILTER_LENGTH });
  const tokens = tokenize(source);
  let index = 0;
  let depth = 0;

  const peek = (offset = 0): Token => tokens[Math.min(index + offset, tokens.length - 1)]!;
  const next = (): Token => tokens[Math.min(index++, tokens.length - 1)]!;
  const describe = (t: Token): string => (t.type === 'end' ? 'the end of the filter' : t.type === 'string' ? `'${t.text}'` : t.type === 'number' ? t.text : t.text);
  const fail = (message: string, t: Token = peek()): never => {
    throw filterError(message, { position: t.pos });
  };
  const isWord = (t: Token, upper: string): boolean => t.type === 'word' && !t.quoted && t.upper === upper;
  const isOp = (t: Token, text: string): boolean => t.type === 'op' && t.text === text;
  const expectOp = (text: string): void => {
    const t = next();
    if (!isOp(t, text)) fail(`expected "${text}" but found ${describe(t)}`, t);
  };
  const expectWord = (upper: string): void => {
    const t = next();
    if (!isWord(t, upper)) fail(`expected ${upper} but found ${describe(t)}`, t);
  };
  const enter = (): void => {
    if (++depth > MAX_DEPTH) fail(`nested deeper than ${MAX_DEPTH} levels`);
  };

  function orExpr(): Expr {
    enter();
    const args = [andExpr()];
    while (isWord(peek(), 'OR')) {
      next();
      args.push(andExpr());
    }
    depth--;
    return args.length === 1 ? args[0]! : { kind: 'or', args };
  }

  function andExpr(): Expr {
    const args = [notExpr()];
    while (isWord(peek(), 'AND')) {
      next();
      args.push(notExpr());
    }
    return args.length === 1 ? args[0]! : { kind: 'and', args };
  }

  function notExpr(): Expr {
    if (isWord(peek(), 'NOT')) {
      next();
      enter();
      const arg = notExpr();
      depth--;
      return { kind: 'not', arg };
    }
    return primary();
  }

  function primary(): Expr {
    const t = peek();
    if (isOp(t, '(')) {
      next();
      const inner = orExpr();
      expectOp(')');
      return inner;
    }
    if ((isWord(t, 'TRUE') || isWord(t, 'FALSE')) && !isComparison(peek(1))) {
      next();
      return { kind: 'literal', value: t.type === 'word' && t.upper === 'TRUE' };
    }
    if (isWord(t, 'S_INTERSECTS')) {
      next();
      expectOp('(');
      const left = spatialOperand();
      expectOp(',');
      const right = spatialOperand();
      expectOp(')');
      return { kind: 's_intersects', left, right };
    }
    return predicate();
  }

  function isComparison(t: Token): boolean {
    return t.type === 'op' && COMPARISON_OPS.has(t.text);
  }

  function predicate(): Expr {
    const value = scalar();
    const t = peek();
    if (isComparison(t)) {
      next();
      return { kind: 'compare', op: t.type === 'op' ? (t.text as ComparisonOp) : '=', left: value, right: scalar() };
    }
    if (isWord(t, 'IS')) {
      next();
      const negated = isWord(peek(), 'NOT') ? (next(), true) : false;
      expectWord('NULL');
      const test: Expr = { kind: 'isNull', value };
      return negated ? { kind: 'not', arg: test } : test;
    }
    const negated = isWord(t, 'NOT') ? (next(), true) : false;
    const op = peek();
    let result: Expr;
    if (isWord(op, 'LIKE')) {
      next();
      result = { kind: 'like', value, pattern: scalar() };
    } else if (isWord(op, 'BETWEEN')) {
      next();
      const low = scalar();
      expectWord('AND');
      result = { kind: 'between', value, low, high: scalar() };
    } else if (isWord(op, 'IN')) {
      next();
      expectOp('(');
      const list = [scalar()];
      while (isOp(peek(), ',')) {
        next();
        list.push(scalar());
      }
      expectOp(')');
      result = { kind: 'in', value, list };
    } else {
      return fail(`expected a comparison (=, <>, <, <=, >, >=, LIKE, BETWEEN, IN, IS NULL) but found ${describe(op)}`, op);
    }
    return negated ? { kind: 'not', arg: result } : result;
  }

  function signedNumber(): number {
    const t = next();
    let sign = 1;
    let n = t;
    if (isOp(t, '-') || isOp(t, '+')) {
      sign = isOp(t, '-') ? -1 : 1;
      n = next();
    }
    if (n.type !== 'number') return fail(`expected a number but found ${describe(n)}`, n);
    return sign * n.value;
  }

  function scalar(): Scalar {
    const t = peek();
    if (t.type === 'string') {
      next();
      return { kind: 'string', value: t.text };
    }
    if (t.type === 'number' || isOp(t, '-') || isOp(t, '+')) return { kind: 'number', value: signedNumber() };
    if (t.type !== 'word') return fail(`expected a property, a literal or a function but found ${describe(t)}`, t);
    if (t.quoted) {
      next();
      return { kind: 'property', name: t.text };
    }
    if (t.upper === 'TRUE' || t.upper === 'FALSE') {
      next();
      return { kind: 'boolean', value: t.upper === 'TRUE' };
    }
    if (t.upper === 'TIMESTAMP' || t.upper === 'DATE') {
      next();
      expectOp('(');
      const s = next();
      if (s.type !== 'string') fail(`${t.upper} needs a quoted string`, s);
      expectOp(')');
      const text = (s as { text: string }).text;
      return t.upper === 'TIMESTAMP' ? { kind: 'timestamp', value: checkTimestamp(text, { position: s.pos }) } : { kind: 'date', value: checkDate(text, { position: s.pos }) };
    }
    if (RESERVED.has(t.upper)) return fail(`expected a property or a literal but found ${t.text}`, t);
    if (t.upper === 'CASEI' && isOp(peek(1), '(')) {
      next();
      expectOp('(');
      const a = next();
      let arg: { kind: 'property'; name: string } | { kind: 'string'; value: string };
      if (a.type === 'string') arg = { kind: 'string', value: a.text };
      else if (a.type === 'word' && (a.quoted || (!RESERVED.has(a.upper) && !isOp(peek(), '(')))) arg = { kind: 'property', name: a.text };
      else return fail(`CASEI takes a property or a string, not ${describe(a)}`, a);
      expectOp(')');
      return { kind: 'casei', arg };
    }
    if (isOp(peek(1), '(')) return fail(`the function ${t.text} is not supported`, t);
    next();
    return { kind: 'property', name: t.text };
  }

  function spatialOperand(): SpatialOperand {
    const t = peek();
    if (t.type !== 'word') return fail(`expected a geometry property, BBOX(…) or a WKT geometry but found ${describe(t)}`, t);
    if (!t.quoted && t.upper === 'BBOX') {
      next();
      expectOp('(');
      const coords = [signedNumber()];
      while (isOp(peek(), ',')) {
        next();
        coords.push(signedNumber());
      }
      expectOp(')');
      return { kind: 'bbox', coords: checkBbox(coords, { position: t.pos }) };
    }
    if (!t.quoted && WKT_TYPES[t.upper]) {
      next();
      const type = WKT_TYPES[t.upper]!;
      if (isWord(peek(), 'Z') || isWord(peek(), 'M') || isWord(peek(), 'ZM')) fail('only 2D geometries are supported');
      const coordinates = wktBody(type);
      return { kind: 'geometry', geometry: checkGeometry({ type, coordinates }, { position: t.pos }) };
    }
    if (isOp(peek(1), '(')) return fail(`${t.text} is not a supported geometry literal (BBOX, POINT, LINESTRING, POLYGON, MULTIPOINT, MULTILINESTRING, MULTIPOLYGON)`, t);
    next();
    return { kind: 'property', name: t.text };
  }

  function position(): number[] {
    return [signedNumber(), signedNumber()];
  }
  function positionList(): number[][] {
    expectOp('(');
    const list = [position()];
    while (isOp(peek(), ',')) {
      next();
      list.push(position());
    }
    expectOp(')');
    return list;
  }
  function listOf<T>(item: () => T): T[] {
    expectOp('(');
    const list = [item()];
    while (isOp(peek(), ',')) {
      next();
      list.push(item());
    }
    expectOp(')');
    return list;
  }
  function wktBody(type: GeoJsonGeometry['type']): unknown {
    switch (type) {
      case 'Point': {
        expectOp('(');
        const p = position();
        expectOp(')');
        return p;
      }
      case 'LineString':
        return positionList();
      case 'Polygon':
        return listOf(positionList);
      case 'MultiPoint':
        // Both MULTIPOINT((1 2),(3 4)) and MULTIPOINT(1 2, 3 4) occur in the wild.
        return listOf(() => {
          if (!isOp(peek(), '(')) return position();
          next();
          const p = position();
          expectOp(')');
          return p;
        });
      case 'MultiLineString':
        return listOf(positionList);
      case 'MultiPolygon':
        return listOf(() => listOf(positionList));
    }
  }

  const expr = orExpr();
  const rest = peek();
  if (rest.type !== 'end') fail(`unexpected ${describe(rest)} after a complete expression`, rest);
  return expr;
}

// --- CQL2 JSON ------------------------------------------------------------------------------------

const JSON_COMPARISONS = new Set(['=', '<>', '<', '<=', '>', '>=']);

export function parseCql2Json(source: string): Expr {
  if (source.length > MAX_FILTER_LENGTH) throw filterError(`longer than ${MAX_FILTER_LENGTH} characters`, { position: MAX_FILTER_LENGTH });
  let document: unknown;
  try {
    document = JSON.parse(source);
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    const position = /position (\d+)/.exec(message);
    throw filterError(`not JSON: ${message}`, { position: position ? Number(position[1]) : 0 });
  }
  return jsonExpr(document, '', 0);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function jsonExpr(node: unknown, path: string, depth: number): Expr {
  if (depth > MAX_DEPTH) throw filterError(`nested deeper than ${MAX_DEPTH} levels`, { path });
  if (typeof node === 'boolean') return { kind: 'literal', value: node };
  if (!isObject(node) || typeof node.op !== 'string' || !Array.isArray(node.args)) {
    throw filterError('expected an object {"op": …, "args": […]}', { path });
  }
  const op = node.op;
  const args = node.args as unknown[];
  const arity = (n: number): void => {
    if (args.length !== n) throw filterError(`"${op}" takes ${n} argument${n === 1 ? '' : 's'}, not ${args.length}`, { path: `${path}/args` });
  };
  const arg = (i: number) => `${path}/args/${i}`;
  switch (op) {
    case 'and':
    case 'or':
      if (args.length < 2) throw filterError(`"${op}" takes at least 2 arguments`, { path: `${path}/args` });
      return { kind: op, args: args.map((a, i) => jsonExpr(a, arg(i), depth + 1)) };
    case 'not':
      arity(1);
      return { kind: 'not', arg: jsonExpr(args[0], arg(0), depth + 1) };
    case 'like':
      arity(2);
      return { kind: 'like', value: jsonScalar(args[0], arg(0)), pattern: jsonScalar(args[1], arg(1)) };
    case 'between':
      arity(3);
      return { kind: 'between', value: jsonScalar(args[0], arg(0)), low: jsonScalar(args[1], arg(1)), high: jsonScalar(args[2], arg(2)) };
    case 'in': {
      arity(2);
      if (!Array.isArray(args[1]) || args[1].length === 0) throw filterError('"in" needs a non-empty array as its second argument', { path: arg(1) });
      return { kind: 'in', value: jsonScalar(args[0], arg(0)), list: (args[1] as unknown[]).map((v, i) => jsonScalar(v, `${arg(1)}/${i}`)) };
    }
    case 'isNull':
      arity(1);
      return { kind: 'isNull', value: jsonScalar(args[0], arg(0)) };
    case 's_intersects':
      arity(2);
      return { kind: 's_intersects', left: jsonSpatial(args[0], arg(0)), right: jsonSpatial(args[1], arg(1)) };
    default:
      if (JSON_COMPARISONS.has(op)) {
        arity(2);
        return { kind: 'compare', op: op as ComparisonOp, left: jsonScalar(args[0], arg(0)), right: jsonScalar(args[1], arg(1)) };
      }
      throw filterError(`the operator "${op}" is not supported`, { path: `${path}/op` });
  }
}

function jsonScalar(node: unknown, path: string): Scalar {
  if (typeof node === 'string') {
    if (node.includes('\u0000')) throw filterError('a string must not contain NUL characters', { path });
    return { kind: 'string', value: node };
  }
  if (typeof node === 'number') return { kind: 'number', value: node };
  if (typeof node === 'boolean') return { kind: 'boolean', value: node };
  if (isObject(node)) {
    const keys = Object.keys(node);
    if (keys.length === 1 && typeof node.property === 'string' && node.property.length > 0) return { kind: 'property', name: node.property };
    if (keys.length === 1 && typeof node.timestamp === 'string') return { kind: 'timestamp', value: checkTimestamp(node.timestamp, { path }) };
    if (keys.length === 1 && typeof node.date === 'string') return { kind: 'date', value: checkDate(node.date, { path }) };
    if (node.op === 'casei' && keys.length === 2 && Array.isArray(node.args) && node.args.length === 1) {
      const arg: unknown = node.args[0];
      if (typeof arg === 'string' && !arg.includes('\u0000')) return { kind: 'casei', arg: { kind: 'string', value: arg } };
      if (isObject(arg) && Object.keys(arg).length === 1 && typeof arg.property === 'string' && arg.property.length > 0) return { kind: 'casei', arg: { kind: 'property', name: arg.property } };
      throw filterError('casei takes one argument: a property {"property": …} or a string', { path: `${path}.args[0]` });
    }
    if (typeof node.op === 'string') throw filterError(`the function or operator "${node.op}" is not supported here`, { path });
  }
  throw filterError('expected a property {"property": …}, a string, number or boolean, or {"timestamp"|"date": …}', { path });
}

function jsonSpatial(node: unknown, path: string): SpatialOperand {
  if (isObject(node)) {
    if (typeof node.property === 'string' && Object.keys(node).length === 1) return { kind: 'property', name: node.property };
    if (Array.isArray(node.bbox) && Object.keys(node).length === 1) {
      if (!node.bbox.every((n) => typeof n === 'number')) throw filterError('bbox needs numbers', { path: `${path}/bbox` });
      return { kind: 'bbox', coords: checkBbox(node.bbox as number[], { path: `${path}/bbox` }) };
    }
    if (typeof node.type === 'string' && 'coordinates' in node) {
      const type = Object.values(WKT_TYPES).find((t) => t === node.type);
      if (!type) throw filterError(`geometry type ${node.type} is not supported`, { path: `${path}/type` });
      return { kind: 'geometry', geometry: checkGeometry({ type, coordinates: node.coordinates }, { path: `${path}/coordinates` }) };
    }
  }
  throw filterError('expected a geometry property {"property": …}, {"bbox": […]} or a GeoJSON geometry', { path });
}

// --- literal checks shared by both encodings ---------------------------------------------------

type Where = { position?: number; path?: string };

const TIMESTAMP = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})$/i;
const DATE = /^\d{4}-\d{2}-\d{2}$/;

/** A calendar date that exists (no 30 February) in years 1 to 9999, which PostgreSQL can hold. */
export function isRealDate(yyyyMmDd: string): boolean {
  const [y, m, d] = yyyyMmDd.split('-').map(Number) as [number, number, number];
  if (y < 1 || m < 1 || m > 12 || d < 1) return false;
  const date = new Date(Date.UTC(2000, m - 1, d));
  date.setUTCFullYear(y);
  return date.getUTCFullYear() === y && date.getUTCMonth() === m - 1 && date.getUTCDate() === d;
}

function checkTimestamp(text: string, where: Where): string {
  if (!TIMESTAMP.test(text) || Number.isNaN(Date.parse(text)) || !isRealDate(text.slice(0, 10))) throw filterError(`${JSON.stringify(text)} is not an RFC 3339 timestamp with a time zone`, where);
  return text;
}

function checkDate(text: string, where: Where): string {
  if (!DATE.test(text) || !isRealDate(text)) {
    throw filterError(`${JSON.stringify(text)} is not a date YYYY-MM-DD`, where);
  }
  return text;
}

function checkBbox(coords: number[], where: Where): number[] {
  if (coords.length !== 4 && coords.length !== 6) throw filterError('BBOX takes 4 (or 6) numbers', where);
  if (!coords.every(Number.isFinite)) throw filterError('BBOX takes finite numbers', where);
  // A 3D box: the vertical extent does not apply to 2D features.
  return coords.length === 6 ? [coords[0]!, coords[1]!, coords[3]!, coords[4]!] : coords;
}

/** Only what PostGIS can build without raising an error reaches SQL: closed rings, enough positions. */
function checkGeometry(geometry: GeoJsonGeometry, where: Where): GeoJsonGeometry {
  const isPosition = (p: unknown): boolean => Array.isArray(p) && p.length === 2 && p.every((n) => typeof n === 'number' && Number.isFinite(n));
  const positions = (list: unknown, min: number, what: string): void => {
    if (!Array.isArray(list) || list.length < min || !list.every(isPosition)) throw filterError(`${what} needs at least ${min} positions of two finite numbers`, where);
  };
  const ring = (r: unknown): void => {
    positions(r, 4, 'a polygon ring');
    const list = r as number[][];
    const [first, last] = [list[0]!, list[list.length - 1]!];
    if (first[0] !== last[0] || first[1] !== last[1]) throw filterError('a polygon ring must be closed (last position equal to the first)', where);
  };
  const polygon = (p: unknown): void => {
    if (!Array.isArray(p) || p.length === 0) throw filterError('a polygon needs at least one ring', where);
    p.forEach(ring);
  };
  const nonEmpty = (c: unknown): unknown[] => {
    if (!Array.isArray(c) || c.length === 0) throw filterError(`a ${geometry.type} needs at least one member`, where);
    return c;
  };
  const c = geometry.coordinates;
  switch (geometry.type) {
    case 'Point':
      if (!isPosition(c)) throw filterError('a point needs two finite numbers', where);
      break;
    case 'LineString':
      positions(c, 2, 'a line string');
      break;
    case 'Polygon':
      polygon(c);
      break;
    case 'MultiPoint':
      positions(c, 1, 'a multipoint');
      break;
    case 'MultiLineString':
      nonEmpty(c).forEach((l) => positions(l, 2, 'a line string'));
      break;
    case 'MultiPolygon':
      nonEmpty(c).forEach(polygon);
      break;
  }
  return geometry;
}
