// Admin commands need a bus without event definitions: they read and repair, never record.
import { createBus, type Bus } from '../bus.js';
import { defineEvents, type EventSchemas } from '../core/events.js';
import { onDatabase, resolveConnection, type ConnectionFlags } from './settings.js';

/** `create`: the command may make a new PGlite database (migrate); the others need an existing one. */
export function adminBus(flags: ConnectionFlags, options: { create?: boolean } = {}): Bus<EventSchemas> {
  const { database, schema } = resolveConnection(flags, options);
  return createBus({ database, schema, events: defineEvents({}) });
}

export async function withAdminBus<T>(flags: ConnectionFlags, fn: (bus: Bus<EventSchemas>) => Promise<T>, options: { create?: boolean } = {}): Promise<T> {
  return onDatabase(adminBus(flags, options), fn);
}
