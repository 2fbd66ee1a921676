// The published package as `npm pack` makes it: it carries its license, and every source map the
// build emits points at files the package ships. The build is compiled in memory with tsconfig.build.json (dist/ is left as it
// is: the CLI tests run bin/rea.js from it), and the listing comes from `npm pack --dry-run`.
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const posix = (p: string) => p.split(sep).join('/');

let packed: Set<string> | undefined;
let declarations: Map<string, string> | undefined;

/** The files `npm pack` puts in the tarball, as paths inside the package (no build: --ignore-scripts). */
function packedFiles(): Set<string> {
  if (packed) return packed;
  const out = execFileSync('npm', ['pack', '--dry-run', '--json', '--ignore-scripts'], { cwd: root, encoding: 'utf8' });
  const [pack] = JSON.parse(out) as { files: { path: string }[] }[];
  packed = new Set(pack!.files.map((f) => f.path));
  return packed;
}

/** The source maps the build writes, by path inside the package, each with its `sources` resolved to paths inside the package. */
function buildMaps(): Map<string, string[]> {
  const parsed = ts.getParsedCommandLineOfConfigFile(join(root, 'tsconfig.build.json'), {}, {
    ...ts.sys,
    onUnRecoverableConfigFileDiagnostic: (d) => { throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n')); },
  })!;
  const program = ts.createProgram({ rootNames: parsed.fileNames, options: parsed.options });
  const maps = new Map<string, string[]>();
  declarations = new Map();
  const emitted = program.emit(undefined, (file, text) => {
    if (file.endsWith('.d.ts')) declarations!.set(posix(relative(root, file)), text);
    if (!file.endsWith('.map')) return;
    const map = JSON.parse(text) as { sources: string[]; sourceRoot?: string };
    const base = resolve(dirname(file), map.sourceRoot ?? '');
    maps.set(posix(relative(root, file)), map.sources.map((s) => posix(relative(root, resolve(base, s)))));
  });
  expect(emitted.emitSkipped).toBe(false);
  return maps;
}

describe('the packed package', () => {
  it('carries the MIT license package.json declares', () => {
    expect(JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).license).toBe('MIT');
    expect(packedFiles().has('LICENSE')).toBe(true);
    const text = readFileSync(join(root, 'LICENSE'), 'utf8');
    expect(text).toMatch(/^MIT License\n\nCopyright \(c\) 2026 the rea authors\n/);
    expect(text).toContain('THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND');
  }, 30_000);

  it('ships the build\'s output, and every source its maps name', () => {
    const files = packedFiles();
    const maps = buildMaps();
    const outDir = posix(relative(root, ts.readConfigFile(join(root, 'tsconfig.build.json'), ts.sys.readFile).config.compilerOptions.outDir));
    const published = (JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { files: string[] }).files;
    expect(published).toContain(outDir);
    const dangling: string[] = [];
    for (const [map, sources] of maps) {
      expect(map.startsWith(`${outDir}/`)).toBe(true);
      for (const source of sources) if (!files.has(source)) dangling.push(`${map} → ${source}`);
    }
    expect(dangling).toEqual([]);
  }, 60_000);

  it("brings the types of every package its declarations import: each is a dependency, with types of its own or its @types one", () => {
    // dist/bus.d.ts imports pg's types (database.postgres takes a pg.Pool) while @types/pg was a
    // devDependency: an application without it failed to compile with skipLibCheck false
    // ("Could not find a declaration file for module 'pg'"), and otherwise had pg.Pool as any.
    if (!declarations) buildMaps();
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
    const imported = new Set<string>();
    for (const text of declarations!.values()) {
      for (const m of text.matchAll(/(?:from\s+|import\()['"]([^'"]+)['"]/g)) {
        const spec = m[1]!;
        if (spec.startsWith('.') || spec.startsWith('node:')) continue;
        imported.add(spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!);
      }
    }
    expect(imported.size).toBeGreaterThan(0);
    const missing: string[] = [];
    for (const name of imported) {
      if (!(name in pkg.dependencies)) { missing.push(`${name}: not a dependency`); continue; }
      const own = JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')) as { types?: string; typings?: string; exports?: unknown };
      const typed = own.types !== undefined || own.typings !== undefined || JSON.stringify(own.exports ?? {}).includes('"types"');
      const typesName = `@types/${name.startsWith('@') ? name.slice(1).replace('/', '__') : name}`;
      if (!typed && !(typesName in pkg.dependencies)) missing.push(`${name}: ships no types, and ${typesName} is not a dependency`);
    }
    expect(missing).toEqual([]);
  }, 60_000);
});
