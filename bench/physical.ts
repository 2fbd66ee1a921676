// Figure 5, the physical limit: what this Node client and this PostgreSQL can commit with no queue
// at all. Plain: BEGIN, one-row insert, COMMIT, from 8 connections. Notify: the same with a
// pg_notify in each transaction, the ceiling of any design that notifies inside the caller's
// commit (PostgreSQL serializes the commits of notifying transactions on one queue lock).
import type pg from 'pg';
import { adminPool, connectClients, drive, endClients } from './lib/env.js';

export const ORDERS_DDL = (schema: string) => `
  create schema if not exists "${schema}";
  create table "${schema}".orders (
    id         bigint generated always as identity primary key,
    order_no   text not null,
    amount     integer not null,
    created_at timestamptz not null default now()
  );`;

export async function createOrders(schema: string): Promise<void> {
  await adminPool().query(ORDERS_DDL(schema));
}

export const insertOrder = (schema: string) => `insert into "${schema}".orders (order_no, amount) values ($1, $2)`;

/** A second table like orders, for figure 4's floor: what one more plain row in the transaction costs. */
export async function createOrderCopy(schema: string): Promise<void> {
  await adminPool().query(`create table "${schema}".orders_copy (like "${schema}".orders including all)`);
}

export const insertOrderCopy = (schema: string) => `insert into "${schema}".orders_copy (order_no, amount) values ($1, $2)`;

/**
 * The order transaction with one more row sent together with COMMIT in one simple-protocol query
 * (as bus.transaction sends its events): no extra round trip, only the row's own work. The row is
 * a plain one into orders_copy unless `rowSql` (one insert statement with literal values) says otherwise.
 */
export async function orderTxWithCommittedRow(c: pg.Client, schema: string, i: number, rowSql?: string) {
  await c.query('BEGIN');
  await c.query(insertOrder(schema), [`o-${i}`, i % 1000]);
  await c.query(`${rowSql ?? `insert into "${schema}".orders_copy (order_no, amount) values ('o-${i}', ${i % 1000})`};\ncommit`);
}

/** One business transaction: BEGIN, insert an order, optionally more work, COMMIT. */
export async function orderTx(c: pg.Client, schema: string, i: number, extra?: (c: pg.Client) => Promise<unknown>) {
  await c.query('BEGIN');
  await c.query(insertOrder(schema), [`o-${i}`, i % 1000]);
  if (extra) await extra(c);
  await c.query('COMMIT');
}

export async function physicalRates(schema: string, total: number, connections: number): Promise<{ plain: number; notify: number }> {
  await createOrders(schema);
  const clients = await connectClients(connections, 'rea-bench-physical');
  try {
    // A short warm-up so the first figure does not pay for connection and plan-cache start-up.
    await drive(clients, Math.min(800, total / 10), (c, i) => orderTx(c, schema, i));
    const plain = await drive(clients, total, (c, i) => orderTx(c, schema, i));
    const notify = await drive(clients, total, (c, i) => orderTx(c, schema, i, (cc) => cc.query(`select pg_notify('x', '')`)));
    return { plain, notify };
  } finally {
    await endClients(clients);
  }
}
