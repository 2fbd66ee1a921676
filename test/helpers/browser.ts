// Debian's Chromium driven by playwright-core: never a downloaded browser, a fresh profile per
// launch, and no background network traffic. `browserAvailable` tells the e2e tests to skip.
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext } from 'playwright-core';

export const CHROMIUM = process.env.REA_CHROMIUM ?? '/usr/bin/chromium';
export const browserAvailable = existsSync(CHROMIUM);

const ARGS = [
  '--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
  '--no-first-run', '--disable-component-update', '--disable-sync',
];

export async function launchBrowser(viewport = { width: 1280, height: 800 }): Promise<{ context: BrowserContext; close: () => Promise<void> }> {
  const profile = mkdtempSync(join(tmpdir(), 'rea-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM, headless: true, args: ARGS, viewport, acceptDownloads: false,
  });
  return {
    context,
    close: async () => {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}
