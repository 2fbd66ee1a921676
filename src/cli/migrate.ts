// rea migrate: apply rea's migrations to the schema.
import { Command } from 'commander';
import { addConnectionFlags, type ConnectionFlags } from './settings.js';
import { withAdminBus } from './admin-bus.js';

export function migrateCommand(): Command {
  return addConnectionFlags(new Command('migrate').description("create or upgrade rea's tables"))
    .option('--json', 'print JSON')
    .action(async (flags: ConnectionFlags & { json?: boolean }) => {
      const { applied, newer } = await withAdminBus(flags, (bus) => bus.migrate(), { create: true });
      if (flags.json) {
        console.log(JSON.stringify({ applied, newer }));
        return;
      }
      console.log(applied.length ? `applied migrations ${applied.join(', ')}` : 'already up to date');
      if (newer.length > 0) {
        console.log(`note: the schema also has migration${newer.length > 1 ? 's' : ''} ${newer.join(', ')} of a newer rea than this one; it runs against them, but upgrade it`);
      }
    });
}
