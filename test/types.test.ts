// The public types as an application's compiler sees them: test/fixtures/typed-api.ts is compiled
// with this repository's tsconfig (strict), and must compile with no error, so every
// `@ts-expect-error` in it must meet one (an unused one is TS2578). `npm run typecheck` checks the
// same file; this test makes `vitest run` check it too.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

function compile(files: string[]): { file: string; code: number; line: number; message: string }[] {
  const config = ts.readConfigFile(join(root, 'tsconfig.json'), (p) => ts.sys.readFile(p));
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, root);
  const program = ts.createProgram({ rootNames: files, options: { ...parsed.options, noEmit: true, rootDir: undefined } });
  return ts.getPreEmitDiagnostics(program).map((d) => ({
    file: d.file?.fileName ?? '',
    code: d.code,
    line: d.file && d.start !== undefined ? d.file.getLineAndCharacterOfPosition(d.start).line + 1 : 0,
    message: ts.flattenDiagnosticMessageText(d.messageText, '\n'),
  }));
}

describe('typed events, as an application compiles them', () => {
  it('payloads are inferred from the schemas, and a wrong type, payload or pattern does not compile', () => {
    const fixture = join(root, 'test/fixtures/typed-api.ts');
    const expected = readFileSync(fixture, 'utf8').match(/^\s*\/\/ @ts-expect-error/gm)?.length ?? 0;
    expect(expected).toBeGreaterThanOrEqual(18);
    // A control: a directive with no error under it is reported, so a clean compile means each one met its error.
    // And the words of one error, which a directive cannot check: a pattern that matches nothing is named.
    // (In test-artifacts/, gitignored, so that its import of ../../src resolves and `npm run typecheck` never sees it.)
    mkdirSync(join(root, 'test-artifacts'), { recursive: true });
    const dir = mkdtempSync(join(root, 'test-artifacts', 'types-'));
    const control = join(dir, 'control.ts');
    writeFileSync(control, [
      '// @ts-expect-error',
      'export const fine: number = 1;',
      "import { z } from 'zod';",
      "import { createBus, defineEvents } from '../../src/index.js';",
      "const bus = createBus({ database: { pglite: 'memory://' }, events: defineEvents({ 'order.created': z.object({ orderNo: z.string() }) }) });",
      "bus.on(['order.created', 'order.crated'], 'typo', async () => {});",
    ].join('\n'));
    try {
      const diagnostics = compile([fixture, control]);
      expect(diagnostics.filter((d) => d.file !== control)).toEqual([]);
      expect(diagnostics.map((d) => [d.line, d.code])).toEqual([[1, 2578], [6, 2345]]);
      expect(diagnostics[1]!.message).toContain("no event type matches 'order.crated'");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  // dist's declarations imported PGlite's type into DatabaseOptions, and PGlite's own declarations
  // need Emscripten's: an application compiling with skipLibCheck: false failed ("Cannot find
  // namespace 'Emscripten'") whether it used PGlite or not.
  it('the declarations the build emits compile in an application with skipLibCheck: false', () => {
    mkdirSync(join(root, 'test-artifacts'), { recursive: true });
    const dir = mkdtempSync(join(root, 'test-artifacts', 'decl-'));
    try {
      const build = ts.getParsedCommandLineOfConfigFile(join(root, 'tsconfig.build.json'), {}, {
        ...ts.sys,
        onUnRecoverableConfigFileDiagnostic: (d) => { throw new Error(ts.flattenDiagnosticMessageText(d.messageText, '\n')); },
      })!;
      const options = { ...build.options, outDir: join(dir, 'dist'), emitDeclarationOnly: true, declarationMap: false, sourceMap: false };
      // The package's entry points (rea, rea/testing) and what they import: what an application sees.
      const emitted = ts.createProgram({ rootNames: [join(root, 'src/index.ts'), join(root, 'src/testing/index.ts')], options }).emit();
      expect(emitted.emitSkipped).toBe(false);
      // Inside the repository, so rea's own dependencies resolve from its node_modules, as an application's would.
      const consumer = join(dir, 'app.ts');
      writeFileSync(consumer, [
        "import { createBus, defineEvents, type DatabaseOptions } from 'rea';",
        "import { runHandlerNow } from 'rea/testing';",
        'void runHandlerNow;',
        "const database: DatabaseOptions = { postgres: 'postgres://localhost/app' };",
        'export const bus = createBus({ database, events: defineEvents({}) });',
      ].join('\n'));
      const program = ts.createProgram({
        rootNames: [consumer],
        options: {
          target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext,
          // skipDefaultLibCheck: TypeScript's own lib files, checked or not, are not the question (and half the time).
          strict: true, skipLibCheck: false, skipDefaultLibCheck: true, noEmit: true, types: ['node'],
          paths: { rea: [join(dir, 'dist', 'index.d.ts')], 'rea/testing': [join(dir, 'dist', 'testing', 'index.d.ts')] },
        },
      });
      const errors = ts.getPreEmitDiagnostics(program).map((d) => `${d.file?.fileName ?? ''}: ${ts.flattenDiagnosticMessageText(d.messageText, '\n')}`);
      expect(errors).toEqual([]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);
});
