// Admin commands need a bus without event definitions: they read and repair, never record.
import { createBus, type Bus } from '../bus.js';
import { defineEvents, type EventSchemas } from '../core/events.js';
import { resolveConnection, type ConnectionFlags } from './settings.js';

export function adminBus(flags: ConnectionFlags): Bus<EventSchemas> {
  const { database, schema } = resolveConnection(flags);
  return createBus({ database, schema, events: defineEvents({}) });
}

export async function withAdminBus<T>(flags: ConnectionFlags, fn: (bus: Bus<EventSchemas>) => Promise<T>): Promise<T> {
  const bus = adminBus(flags);
  try {
    return await fn(bus);
  } finally {
    await bus.stop();
  }
}
