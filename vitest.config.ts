import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 30_000,
    hookTimeout: 60_000,
    // Files run in parallel processes; each test uses its own schema, so order never matters.
    pool: 'forks',
    maxWorkers: 2,
    // rea logs handler failures at warn; tests cause many on purpose.
    env: { REA_LOG_LEVEL: process.env.REA_LOG_LEVEL ?? 'silent' },
  },
});
