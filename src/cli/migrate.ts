// rea migrate: apply rea's migrations to the schema (--dry-run: say which it would apply).
import { Command } from 'commander';
import { addConnectionFlags, type ConnectionFlags } from './settings.js';
import { withAdminBus } from './admin-bus.js';
import { EXIT_FAILED } from './exit-codes.js';

export function migrateCommand(): Command {
  return addConnectionFlags(new Command('migrate').description("create or upgrade rea's tables"))
    .option('--json', 'print JSON')
    .option('--dry-run', 'list the migrations it would apply, and apply none')
    .action(async (flags: ConnectionFlags & { json?: boolean; dryRun?: boolean }) => {
      if (flags.dryRun) return dryRun(flags);
      const { applied, newer } = await withAdminBus(flags, (bus) => bus.migrate(), { create: true });
      if (flags.json) {
        console.log(JSON.stringify({ applied, newer }));
        return;
      }
      console.log(applied.length ? `applied migrations ${applied.join(', ')}` : 'already up to date');
      if (newer.length > 0) console.log(newerNote(newer));
    });
}

// A read: no lock, nothing created (a PGlite directory must exist already).
async function dryRun(flags: ConnectionFlags & { json?: boolean }): Promise<void> {
  const { pending, newer, breaking, knownUpTo } = await withAdminBus(flags, (bus) => bus.driver.migrationStatus!());
  // rea migrate would refuse the schema (DatabaseError too-new): so does its dry run, exit 1.
  if (breaking.length > 0) process.exitCode = EXIT_FAILED;
  if (flags.json) {
    console.log(JSON.stringify({ pending, newer, breaking }));
    return;
  }
  if (breaking.length > 0) {
    console.log(`would apply nothing: the schema has migration${breaking.length > 1 ? 's' : ''} ${breaking.join(', ')} of a newer rea, which older versions must not run against (this rea knows migrations up to ${knownUpTo}); rea migrate refuses it`);
    return;
  }
  console.log(pending.length ? `would apply migrations ${pending.map((m) => `${m.version} (${m.name})`).join(', ')}` : 'already up to date');
  if (newer.length > 0) console.log(newerNote(newer));
}

function newerNote(newer: number[]): string {
  return `note: the schema also has migration${newer.length > 1 ? 's' : ''} ${newer.join(', ')} of a newer rea than this one; it runs against them, but upgrade it`;
}
