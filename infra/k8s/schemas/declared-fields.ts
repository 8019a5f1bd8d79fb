import { fileURLToPath } from 'node:url';
import ts from 'typescript';

/**
 * Unknown fields, found through the models' TypeScript declarations. The models' validators (compiled
 * from the same schemas) accept any field they do not list, as the OpenAPI documents do; the API server
 * refuses them (strict field validation, server-side apply's default) or drops them silently (a CRD's
 * pruning), so a typo such as `resource:` for `resources:` would go unnoticed. Every model ships a
 * declaration naming each field it knows (`interface IDeployment { metadata?: …; spec?: … }`), generated
 * from the same definitions as its validator; this walks an object beside its declaration and names
 * every field the declaration lacks.
 *
 * Open on purpose, as the server is: a map (an index signature such as labels), `any`, and a declared
 * object without fields (RawExtension, a schema that preserves unknown fields). A value whose shape
 * differs from its declaration (a string where an object belongs) is the validator's to report.
 */

/** A model's declaration: the module that exports it and the interface's name. */
export interface Declaration {
  module: string;
  name: string;
}

/** Deep enough for any object here (a Pod template nests about twelve levels); the walk stops there. */
const MAX_DEPTH = 64;
/** Enough to read what went wrong; the walk stops collecting there. */
const MAX_FINDINGS = 50;

const isPlainObject = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === 'object' && !Array.isArray(v);

/**
 * One TypeScript program over the given declarations (parsed once; about 400 declaration files for the
 * kinds here), answering "which fields of this value does its declaration lack".
 */
export function declaredFields(declarations: Declaration[]) {
  // A source file that only names the declarations; it sits in this folder so that module resolution
  // finds the packages in the repository's node_modules. It exists in memory only.
  const entry = fileURLToPath(new URL('./declared-fields.entry.ts', import.meta.url));
  const text = declarations.map((d, i) => `import type { ${d.name} as D${i} } from '${d.module}';\nexport type T${i} = D${i};`).join('\n');
  const options: ts.CompilerOptions = {
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    target: ts.ScriptTarget.ES2022,
    lib: ['lib.es5.d.ts'],
    types: [],
    strict: true,
    noEmit: true,
  };
  const host = ts.createCompilerHost(options);
  const { getSourceFile, fileExists } = host;
  host.getSourceFile = (file, language, ...rest) => (file === entry ? ts.createSourceFile(file, text, language) : getSourceFile.call(host, file, language, ...rest));
  host.fileExists = (file) => file === entry || fileExists.call(host, file);
  const program = ts.createProgram([entry], options, host);
  const source = program.getSourceFile(entry);
  if (!source) throw new Error(`${entry} was not read`);

  // A declaration that does not resolve would silently become `any` and accept everything: refuse it.
  const unresolved = program.getSemanticDiagnostics(source);
  if (unresolved.length > 0) throw new Error(`model declarations not found: ${unresolved.map((d) => ts.flattenDiagnosticMessageText(d.messageText, ' ')).join('; ')}`);

  const checker = program.getTypeChecker();
  const aliases = new Map(source.statements.flatMap((s) => (ts.isTypeAliasDeclaration(s) ? [[s.name.text, s] as const] : [])));
  const types = new Map(
    declarations.map((d, i) => {
      const alias = aliases.get(`T${i}`);
      if (!alias) throw new Error(`no alias for ${d.name}`);
      return [`${d.module}#${d.name}`, checker.getTypeAtLocation(alias.name)];
    }),
  );

  /** The member types a value could be, `undefined` and `null` aside. */
  const members = (type: ts.Type) => (type.isUnion() ? type.types : [type]).filter((t) => !(t.flags & (ts.TypeFlags.Undefined | ts.TypeFlags.Null)));

  function walk(value: unknown, type: ts.Type, path: string, depth: number, findings: string[]): void {
    if (findings.length >= MAX_FINDINGS || value === null || value === undefined) return;
    if (depth > MAX_DEPTH) {
      findings.push(`${path || '/'} nested deeper than ${MAX_DEPTH} levels`);
      return;
    }
    const candidates = members(type);
    if (candidates.some((t) => t.flags & (ts.TypeFlags.Any | ts.TypeFlags.Unknown))) return;
    if (Array.isArray(value)) {
      const list = candidates.find((t) => checker.isArrayType(t));
      const element = list && checker.getTypeArguments(list as ts.TypeReference)[0];
      if (element) value.forEach((item, i) => walk(item, element, `${path}/${i}`, depth + 1, findings));
      return;
    }
    if (!isPlainObject(value)) return;
    const objects = candidates.filter((t) => t.flags & ts.TypeFlags.Object && !checker.isArrayType(t));
    if (objects.length === 0) return;
    // A declared object without fields or index signature stands for any content.
    if (objects.some((t) => checker.getPropertiesOfType(t).length === 0 && checker.getIndexInfosOfType(t).length === 0)) return;
    for (const [key, field] of Object.entries(value)) {
      const at = `${path}/${key}`;
      const declared = objects.map((t) => checker.getPropertyOfType(t, key)).find((p) => p !== undefined);
      if (declared) {
        walk(field, checker.getTypeOfSymbol(declared), at, depth + 1, findings);
        continue;
      }
      const index = objects.map((t) => checker.getIndexInfoOfType(t, ts.IndexKind.String)).find((i) => i !== undefined);
      if (index) walk(field, index.type, at, depth + 1, findings);
      else findings.push(`${at} is not a field of ${checker.typeToString(objects[0]!)}`);
      if (findings.length >= MAX_FINDINGS) return;
    }
  }

  /** The fields of `value` that `declaration` does not declare, each as a JSON pointer below `path`. */
  return function undeclaredFields(value: unknown, declaration: Declaration, path = ''): string[] {
    const type = types.get(`${declaration.module}#${declaration.name}`);
    if (!type) throw new Error(`${declaration.name} from ${declaration.module} was not among the declarations loaded`);
    const findings: string[] = [];
    walk(value, type, path, 0, findings);
    return findings;
  };
}
