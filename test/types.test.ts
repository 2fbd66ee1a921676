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
});
