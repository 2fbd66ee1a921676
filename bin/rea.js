#!/usr/bin/env node
// The `rea` command: a thin launcher for the compiled CLI.
import { main } from '../dist/cli/main.js';

main(process.argv).catch((err) => {
  console.error(err?.message ?? err);
  process.exit(1);
});
