// Admin commands need a bus without event definitions: they read and repair, never record.
import { ADMIN_WRITES, createBus, type Bus } from '../bus.js';
import { defineEvents, type EventSchemas } from '../core/events.js';
import { onDatabase, resolveConnection, type ConnectionFlags } from './settings.js';

/** `create`: the command may make a new PGlite database (migrate); the others need an existing one. */
export function adminBus(flags: ConnectionFlags, options: { create?: boolean } = {}): Bus<EventSchemas> {
  const { database, schema } = resolveConnection(flags, options);
  return guardWrites(createBus({ database, schema, events: defineEvents({}) }));
}

export async function withAdminBus<T>(flags: ConnectionFlags, fn: (bus: Bus<EventSchemas>) => Promise<T>, options: { create?: boolean } = {}): Promise<T> {
  return onDatabase(adminBus(flags, options), fn);
}

/**
 * The bus with its writes checked first, each one, against the schema's migrations, as `rea run`
 * checks at start: a schema a newer rea marked breaking (older code would misread or damage what
 * it changed) is refused with DatabaseError 'too-new'. An admin bus is never started, so nothing
 * else checked: rea jobs retry, rea endpoints add and the panel's buttons of an older rea wrote to
 * a schema its rea run refused. A schema that is missing or behind is left to the statements (a
 * missing table is 'not-migrated'), so that a malformed flag is still said first. Reads go on,
 * whatever the schema says: they change nothing, and during an incident an old CLI that can read
 * is better than none (rea status says where the schema stands). Each write asks again: the panel
 * runs for days, across deploys.
 */
export function guardWrites(bus: Bus<EventSchemas>): Bus<EventSchemas> {
  // Methods run on the object itself, not the proxy (the driver is a class with private fields).
  const checked = (group: object, names: readonly string[]) => new Proxy(group, {
    get(target, key) {
      const value: unknown = Reflect.get(target, key);
      if (typeof value !== 'function') return value;
      const method = value.bind(target) as (...args: unknown[]) => unknown;
      if (typeof key !== 'string' || !names.includes(key)) return method;
      return async (...args: unknown[]) => {
        await refuseTooNew(bus);
        return method(...args);
      };
    },
  });
  return new Proxy(bus, {
    get(target, key) {
      const value: unknown = Reflect.get(target, key);
      return typeof key === 'string' && ADMIN_WRITES[key] && value ? checked(value as object, ADMIN_WRITES[key]) : value;
    },
  });
}

async function refuseTooNew(bus: Bus<EventSchemas>): Promise<void> {
  const status = await bus.driver.migrationStatus!();
  // checkMigrated words the refusal as rea run and rea migrate do (DatabaseError 'too-new').
  if (status.breaking.length > 0) await bus.driver.checkMigrated();
}
