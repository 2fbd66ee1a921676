// The PostgreSQL driver on node-postgres: a pool for rea's own work, a dedicated connection for LISTEN.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { ABORTED_TRANSACTION, DatabaseError, TransactionError } from '../../core/errors.js';
import { within } from '../../core/within.js';
import type { Driver, DriverCapabilities, EventInsert, MigrationStatus, Queryable, TransactionOptions } from '../../driver/types.js';
import { unwrapPostgresTransaction } from '../../tx/postgres.js';
import { isReaTransaction } from '../../tx/rea.js';
import { checkConnectionString, checkMigrated, migrateRetryingLocks, type MigrateOptions, migrationStatus, reaStatementFailed, socketSettings, type SocketSettings, describeConnection, explainPostgresError, isTransientPostgresError, quoteSchema, runMigrations } from './common.js';
import { eventChunks, PostgresExecutor } from './executor.js';
import { PostgresWebhookExecutor } from './executor-webhooks.js';
import { PostgresAdminExecutor } from './executor-admin.js';
import { PostgresOperationsExecutor } from './executor-operations.js';
import { preparedQueryable, statementSet } from './prepared.js';
import { cancelKeyOf, sendCancelRequest } from './cancel.js';
import { deadlineError, dropConnection, QUERY_TIMEOUT_MS, isDeadlineError, queryWithin, withDeadline, withTimeout, type PgQueryable } from './deadline.js';
import { migrationStatements, postgresStatements, wakeupNotify } from './sql.js';

export interface PostgresDriverOptions {
  /** A connection string, or a pg.Pool the application already owns (rea will not end it). */
  connection: string | pg.Pool;
  schema: string;
  /** Pool size when rea creates the pool. */
  poolSize: number;
  /** How long a statement on rea's connections waits for its answer before rea closes the connection (default QUERY_TIMEOUT_MS); 0: for ever. */
  queryTimeoutMs?: number;
  /** 'transaction': `connection` goes through a pooler in transaction mode, so no statement is prepared by name. */
  pooler?: 'transaction';
  /** The LISTEN (and wake-up) connection's own connection string, or false: no LISTEN. Default: `connection`'s. */
  listen?: string | false;
  onError: (err: Error, where: string) => void;
}

/**
 * The server's transaction status after the connection's last statement, from the protocol's
 * ReadyForQuery: 'I' idle, 'T' in a transaction, 'E' failed. Undefined where the client does not
 * say (pg-native), and then nothing is checked.
 */
function transactionStatus(client: pg.PoolClient): string | undefined {
  const c = client as unknown as { getTransactionStatus?: () => string | null };
  return c.getTransactionStatus?.() ?? undefined;
}

function abortedTransaction(cause?: unknown): TransactionError {
  return new TransactionError('aborted', ABORTED_TRANSACTION, cause);
}

/** How long close() waits for connections still busy once rea's own work has stopped. */
export const CLOSE_WAIT_MS = 2_000;

/** How long an aborted transaction waits for its statement's cancel before dropping the connection anyway. */
const CANCEL_WAIT_MS = 1_000;

/**
 * BEGIN for a transaction of rea's own statements alone (TransactionOptions.ownStatements), in the
 * same round trip. With statistics, the plan cache judged a relay round's generic plan dearer than
 * a custom one (it takes the round's limit, a parameter, for a tenth of the table) and planned the
 * statement again at every round, ~1 ms of a round's ~4; the generic plan is as good (plans.test.ts
 * checks its scans). SET LOCAL: the connection's next user (a handler's transaction) keeps its own
 * setting.
 */
export const BEGIN_OWN = 'begin; set local plan_cache_mode = force_generic_plan';

/** How long a new LISTEN connection may take to hear the NOTIFY it asked for through the pool (see probeListen). */
export const LISTEN_PROBE_WAIT_MS = 5_000;

export class PostgresDriver implements Driver {
  readonly capabilities: DriverCapabilities = { listenNotify: true, skipLocked: true, concurrentTransactions: true, inlineDelivery: true, autovacuumDaemon: true, deferredRecord: true, dialect: 'postgres' };
  readonly schema: string;
  readonly executor: PostgresExecutor;
  readonly admin: PostgresAdminExecutor;
  readonly webhooks: PostgresWebhookExecutor;
  readonly operations: PostgresOperationsExecutor;
  private readonly pool: pg.Pool;
  private readonly ownsPool: boolean;
  private readonly connectionString: string | undefined;
  /** Connect timeout and keepalive of the connections rea opens from a connection string. */
  private readonly socket: SocketSettings | undefined;
  /** The same, of database.listen's connection string. */
  private readonly listenSocket: SocketSettings | undefined;
  private readonly sql: ReturnType<typeof postgresStatements>;
  private listeners: { close: () => Promise<void>; client: () => pg.Client | undefined }[] = [];
  /** Wake-ups waiting for the one in flight (on the LISTEN or the wake-up connection), by channel and payload. */
  private readonly notifyQueue = new Map<string, [string, string]>();
  private notifying = false;
  /** The wake-up connection while no LISTEN connection is open (a process that only records). */
  private notifier: Promise<pg.Client> | undefined;
  /** The /healthz connection (healthRun), while it answers. */
  private health: { client: pg.Client; opened: Promise<pg.Client> } | undefined;
  private closed = false;
  /** The server, without its password, for error messages. */
  private readonly where: string;
  /** rea's own statements, run as named prepared statements. */
  private readonly hot: ReadonlySet<string>;
  /** How long a statement on rea's connections waits for its answer (see deadline.ts); 0: for ever. */
  private readonly queryTimeoutMs: number;
  /** The pool, with that deadline on every statement. */
  private readonly timed: PgQueryable;
  /** The pool with rea's own statements prepared by name (the executor's, and query()'s: the relay's round runs through it). */
  private readonly prepared: Queryable;
  /** The last statement sent (or waiting) on each LISTEN connection: the next one goes after it. */
  private readonly listenerTails = new WeakMap<pg.Client, Promise<unknown>>();
  /** The pool's idle connections (its own list is not public): closed when a statement's deadline runs out. */
  private readonly idle = new Set<pg.PoolClient>();

  constructor(private readonly options: PostgresDriverOptions) {
    this.schema = options.schema;
    this.queryTimeoutMs = options.queryTimeoutMs ?? QUERY_TIMEOUT_MS;
    const s = quoteSchema(options.schema);
    this.sql = postgresStatements(s);
    if (typeof options.listen === 'string') {
      checkConnectionString(options.listen, 'database.listen');
      this.listenSocket = socketSettings(options.listen, 'database.listen');
    }
    if (typeof options.connection === 'string') {
      checkConnectionString(options.connection, 'database.postgres');
      this.connectionString = options.connection;
      this.socket = socketSettings(options.connection, 'database.postgres');
      const { connectionTimeoutMillis, ...keepAlive } = this.socket;
      // The connect timeout goes to each connection, not to the pool: the pool would also give up
      // on a caller waiting that long for a free connection, and a full pool is no fault.
      class Client extends pg.Client {
        constructor(config?: pg.ClientConfig) {
          super({ ...config, connectionTimeoutMillis });
        }
      }
      this.pool = new pg.Pool({ connectionString: options.connection, max: options.poolSize, application_name: 'rea', Client, ...keepAlive });
      this.ownsPool = true;
    } else {
      this.pool = options.connection;
      this.ownsPool = false;
    }
    // An idle client that loses its connection must not crash the process.
    const poolOptions = (this.pool as unknown as { options: pg.PoolConfig }).options;
    this.where = describeConnection(this.connectionString ?? poolOptions.connectionString, poolOptions as never);
    // An idle connection rea closed itself after a deadline (dropAfterDeadline) is not news: the
    // statement past its deadline was reported.
    this.pool.on('error', (err) => {
      if (!(err instanceof ClosedAfterDeadline)) options.onError(err, 'pool');
    });
    // Nor one in use: pg-pool listens only while a client is idle or inside pool.query, and a
    // socket error can still arrive after a query failed (server restart, pg_terminate_backend).
    // A permanent listener on every client keeps such a late 'error' from becoming uncaught.
    this.pool.on('connect', (client) => client.on('error', () => {}));
    // A statement past its deadline leaves its connection waiting for an answer: closed, not reused.
    // The pool's idle connections most likely went the same way (a failover, a partition), and
    // each would cost the next statement sent on it a deadline of its own: they are closed too,
    // and the pool opens new ones as they are needed.
    this.pool.on('acquire', (client) => this.idle.delete(client));
    this.pool.on('remove', (client) => this.idle.delete(client));
    this.pool.on('release', (err: unknown, client: pg.PoolClient) => {
      if (isDeadlineError(err)) this.dropAfterDeadline(client);
      else this.idle.add(client);
    });
    // Behind a pooler in transaction mode each statement may run on another server connection,
    // where a statement prepared on the last one does not exist (or one of the same name does):
    // none is prepared by name there (see prepared.ts).
    this.hot = options.pooler === 'transaction' ? new Set() : statementSet(this.sql);
    // rea's statements on the pool wait at most queryTimeoutMs for their answer (see deadline.ts),
    // the admin API's too: a panel left open through a failover would otherwise hold a pool
    // connection per request until TCP gave up, and leave none for the relay. /healthz has its
    // own timeout and connection; VACUUM takes as long as the table needs.
    const timed = (this.timed = withDeadline(this.pool as PgQueryable, this.queryTimeoutMs, this.where));
    this.prepared = preparedQueryable(timed, this.hot);
    this.executor = new PostgresExecutor(this.prepared, this.sql);
    this.admin = new PostgresAdminExecutor(timed as Queryable, s, (fn, timeoutMs) => this.healthRun(fn, timeoutMs));
    this.webhooks = new PostgresWebhookExecutor(timed as Queryable, s);
    this.operations = new PostgresOperationsExecutor(timed as Queryable, options.schema, s, (fn) => this.transaction(fn), this.pool);
  }

  migrate(options?: MigrateOptions): Promise<{ applied: number[]; newer: number[] }> {
    return migrateRetryingLocks(
      // No deadline: a migration takes as long as the table it alters needs.
      () => this.transactionWithin(0, (q) => runMigrations(q, (text) => q.query(text), this.schema, this.where)),
      async () => (await this.timed.query(migrationStatements.lockHolders, [this.schema])).rows,
      this.schema,
      options,
    );
  }

  checkMigrated(): Promise<{ newer: number[] }> {
    return checkMigrated(this.timed as Queryable, this.schema, this.where);
  }

  migrationStatus(): Promise<MigrationStatus> {
    return migrationStatus(this.timed as Queryable, this.schema, this.where);
  }

  transaction<T>(fn: (q: Queryable, raw: unknown) => Promise<T>, options?: TransactionOptions): Promise<T> {
    return this.transactionWithin(this.queryTimeoutMs, fn, options);
  }

  /** A transaction whose statements each wait at most `ms` for their answer (0: for ever); see deadline.ts. */
  private async transactionWithin<T>(ms: number, fn: (q: Queryable, raw: unknown) => Promise<T>, options?: TransactionOptions): Promise<T> {
    const client = await this.pool.connect();
    let broken: Error | undefined;
    // A checked-out client has no error listener of the pool's; without ours, a connection
    // killed mid-transaction would crash the process instead of failing this transaction.
    const onError = (err: Error) => {
      broken = err;
      this.options.onError(err, 'transaction');
    };
    client.on('error', onError);
    // Every statement has the deadline, the application's in tx.query too: one that a failover
    // left unanswered would otherwise hold its pool connection until TCP gave up, and enough of
    // them would leave none for the relay. (tx.raw, the client itself, is the application's.) But
    // where the caller bounds the callback itself (`aborted`: a transactional handler, cut off at
    // its timeout and its connection dropped), the application's statements are left to that
    // bound: a handler given 10 minutes may run a statement longer than the deadline.
    const q = options?.aborted
      ? preparedQueryable(client as PgQueryable, this.hot, ms)
      : preparedQueryable(withDeadline(client as PgQueryable, ms, this.where), this.hot);
    try {
      await client.query(withTimeout(options?.ownStatements ? BEGIN_OWN : 'BEGIN', undefined, ms));
      const result = await fn(q, client);
      // Ended inside the callback (a COMMIT on tx.raw): sent now, the events would be stored
      // on their own, outside it. A successful statement's reply comes with the connection's
      // status, so this is known by now.
      if (transactionStatus(client) === 'I') {
        throw new TransactionError('ended', 'the transaction ended inside the callback (a COMMIT or ROLLBACK sent on tx.raw, e.g. by an ORM that began a transaction of its own on it): the statements after it ran outside any transaction, each committed on its own, and rea committed nothing more');
      }
      // Deferred events travel with COMMIT in one simple-protocol query: if the insert fails, the
      // transaction is aborted, COMMIT never runs, and the error reaches the caller. A bulk
      // recordMany goes in statements of bounded size first; its last part travels with COMMIT.
      const chunks = eventChunks(options?.pendingEvents?.() ?? []);
      const last = chunks.pop();
      for (const chunk of chunks) await this.executor.eventInsertMany(q, chunk);
      // A statement that failed and was caught inside the callback has aborted the transaction:
      // the events' insert is then refused (25P02, below), and a bare COMMIT answers ROLLBACK, no error.
      let committed: pg.QueryResult | pg.QueryResult[];
      try {
        committed = await client.query(withTimeout(last ? `${this.eventInsertLiteral(last)};\ncommit` : 'COMMIT', undefined, ms));
      } catch (err) {
        // The COMMIT was sent: whether the server carried it out before it went silent is not known.
        if (isDeadlineError(err)) throw deadlineError(this.where, ms, err, '; whether the transaction committed is not known');
        // The events' insert, which runs first, is rea's statement (COMMIT meets no missing column).
        throw last ? reaStatementFailed(err) : err;
      }
      if ((Array.isArray(committed) ? committed.at(-1) : committed)?.command === 'ROLLBACK') throw abortedTransaction();
      return result;
    } catch (err) {
      if (isDeadlineError(err)) {
        // No answer within the deadline: the server rolls the transaction back when the connection
        // goes (a ROLLBACK would wait behind the unanswered statement, for as long).
        broken = err as Error;
        this.dropAfterDeadline(client);
        throw err instanceof DatabaseError ? err : deadlineError(this.where, ms, err);
      }
      if (options?.aborted?.()) {
        // A ROLLBACK would wait behind the statement still running, and a write the handler
        // makes later on the raw client would then run outside any transaction and commit. The
        // server rolls the transaction back when the connection goes; cancelling the statement
        // first makes that now, and frees its locks.
        broken = err instanceof Error ? err : new Error('transaction aborted');
        await this.cancelStatement(client);
        throw err;
      }
      try {
        await client.query('ROLLBACK');
      } catch (rollbackErr) {
        broken = rollbackErr as Error; // the connection is gone; do not return it to the pool
      }
      // Refused because an earlier statement failed and its error was caught in the callback.
      throw (err as { code?: string })?.code === '25P02' ? abortedTransaction(err) : err;
    } finally {
      client.off('error', onError);
      client.release(broken);
    }
  }

  /**
   * A statement on `client` got no answer within its deadline: close it, and the pool's idle
   * connections with it. The statement is cancelled too, when the server can be reached: a backend
   * waiting on a lock does not notice its client has gone until it next writes to it, so it held its
   * transaction and locks for as long as the lock's holder (16 such were seen queued behind a frozen
   * worker's transaction). Not behind a pooler: PgBouncer 1.18 died when a cancel and the client's
   * close reached it together (see cancelStatement).
   */
  private dropAfterDeadline(client: pg.ClientBase): void {
    const key = this.options.pooler === undefined ? cancelKeyOf(client) : null;
    // A server that does not answer (the usual reason for a deadline) does not answer this either.
    if (key) void sendCancelRequest(key, CANCEL_WAIT_MS).catch(() => {});
    dropConnection(client);
    // Closed with an error: the pool forgets an idle connection only on its 'error' (a close
    // without one left it in the pool, dead, and the next transaction given it failed with
    // "Connection terminated unexpectedly", one per such connection).
    for (const c of this.idle) dropConnection(c, new ClosedAfterDeadline());
    this.idle.clear();
  }

  /** Cancel what `client` is running (a CancelRequest, see cancel.ts); waits at most CANCEL_WAIT_MS. */
  private async cancelStatement(client: pg.PoolClient): Promise<void> {
    const key = cancelKeyOf(client);
    if (!key) return;
    await sendCancelRequest(key, CANCEL_WAIT_MS).catch((err: unknown) => this.options.onError(err as Error, 'cancel'));
  }

  /** The events insert with its values as escaped literals, for the simple protocol (no parameters). */
  private eventInsertLiteral(events: EventInsert[]): string {
    const lit = (v: string | null) => (v === null ? 'null' : escapeLiteral(v));
    const rows = events.map((e) =>
      `(${lit(e.id)}::uuid, ${lit(e.type)}, ${lit(e.subject)}, ${lit(e.payloadJson)}::jsonb, ${lit(e.traceId)}, ${lit(e.createdBy)}, ${Number(e.version) | 0}, ` +
      `${lit(e.spanId)}, ${e.traceFlags === null ? 'null' : Number(e.traceFlags) & 0xff})`);
    return `${this.sql.eventInsertValuesPrefix} ${rows.join(', ')}`;
  }

  async execScript(sql: string): Promise<void> {
    // Without parameters node-postgres uses the simple protocol, which runs several statements.
    await this.transactionWithin(0, (q) => q.query(sql));
  }

  unwrapTransaction(tx: unknown, caller: string): Queryable {
    const q = unwrapPostgresTransaction(tx, caller);
    // A rea transaction already names rea's statements; a caller's pg client gets the same.
    return isReaTransaction(tx) ? q : preparedQueryable(q as never, this.hot);
  }

  async query<R>(text: string, params?: unknown[]) {
    // rea's own statements prepared by name, as on the executor's pool: the relay's round (a
    // statement of 100 lines) runs through here and was parsed and planned again each time,
    // ~2 ms of the server's time a round. Anything else stays unnamed (see prepared.ts).
    const res = await this.prepared.query(text, params);
    return { rows: res.rows as R[] };
  }

  isTransientError(err: unknown): boolean {
    return isTransientPostgresError(err);
  }

  explainError(err: unknown, options?: { reaStatement?: boolean }): unknown {
    return explainPostgresError(options?.reaStatement ? reaStatementFailed(err) : err, this.schema, this.where);
  }

  async listen(channel: string, onNotify: (payload: string) => void): Promise<() => Promise<void>> {
    // database.listen: false. Wake-ups from other processes are not heard; the polls find their work.
    if (this.options.listen === false) return async () => {};
    let closed = false;
    let client: pg.Client | undefined;
    let retryTimer: NodeJS.Timeout | undefined;
    let heartbeat: NodeJS.Timeout | undefined;
    const connect = async (): Promise<void> => {
      const c = this.ownClient('rea-listen', 'listen');
      let ownPid: number | undefined;
      // See probeListen.
      const probe = `rea_probe_${randomBytes(8).toString('hex')}`;
      let probeHeard!: () => void;
      const heard = new Promise<void>((resolve) => (probeHeard = resolve));
      c.on('notification', (msg) => {
        if (msg.channel === probe) return probeHeard();
        // PostgreSQL also delivers a session's own NOTIFY to it. Wake-ups go out on this very
        // connection, and this process woke its own relay and worker before sending them.
        if (msg.channel === channel && msg.processId !== ownPid) onNotify(msg.payload ?? '');
      });
      c.on('error', (err) => {
        clearInterval(heartbeat);
        this.options.onError(err, 'listen');
        c.end().catch(() => {});
        if (!closed) scheduleReconnect();
      });
      await c.connect();
      ownPid = (await c.query<{ pid: number }>(this.sql.backendPid)).rows[0]!.pid;
      // The probe's channel first: the last statement, which pg_stat_activity shows, is rea's LISTEN.
      await c.query(`LISTEN "${probe}"`);
      await c.query(`LISTEN "${channel}"`);
      if (closed) {
        // Closed while this (re)connection was on its way: close() found no client to end, and
        // this one would keep LISTENing, and the process alive, for ever.
        await c.end().catch(() => {});
        return;
      }
      client = c;
      // A LISTEN connection that went silent (a failover, a NAT entry dropped) hears no wake-up,
      // and says nothing: it is asked for an answer every queryTimeoutMs, within that, and
      // replaced when none comes (its error handler reconnects).
      if (this.queryTimeoutMs > 0) {
        heartbeat = setInterval(() => {
          this.onListener(c, this.sql.backendPid).catch(() => {});
        }, this.queryTimeoutMs);
        heartbeat.unref();
      }
      void this.probeListen(probe, heard, () => client === c && !closed);
      // Wake-ups go out on this connection from now on; the one kept for them until now can go.
      this.closeNotifier();
      // Anything recorded while we were not listening is found by the next poll; nudge it now.
      onNotify('reconnected');
    };
    const scheduleReconnect = () => {
      client = undefined;
      clearTimeout(retryTimer);
      retryTimer = setTimeout(() => {
        connect().catch((err) => {
          this.options.onError(err as Error, 'listen');
          if (!closed) scheduleReconnect();
        });
      }, 1000);
      retryTimer.unref();
    };
    try {
      await connect();
    } catch (err) {
      this.options.onError(err as Error, 'listen');
      scheduleReconnect();
    }
    const handle = {
      client: () => client,
      close: async () => {
        closed = true;
        clearTimeout(retryTimer);
        clearInterval(heartbeat);
        await client?.end().catch(() => {});
      },
    };
    this.listeners.push(handle);
    return handle.close;
  }

  /**
   * Ask a new LISTEN connection to hear a NOTIFY sent through the pool, on a channel of its own
   * (`probe`, which it listens on and nothing else does): `heard` settles when it comes. Through a
   * pooler in transaction mode a LISTEN lands on a server session the pooler hands to whichever
   * client comes next, and its notifications are dropped: every wake-up from another process is
   * lost without a word, and its events wait for the polls. That is said once per connection.
   */
  private async probeListen(probe: string, heard: Promise<void>, current: () => boolean): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    try {
      await this.timed.query(this.sql.notify, [probe, '']);
      const late = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), LISTEN_PROBE_WAIT_MS)));
      if ((await Promise.race([heard, late])) === 'late' && current() && !this.closed) {
        this.options.onError(new Error(`the LISTEN connection did not hear a NOTIFY sent through rea's pool within ${LISTEN_PROBE_WAIT_MS} ms, so wake-ups from other processes are lost and their events wait for the polls: `
          + 'is a pooler in transaction mode (PgBouncer) between rea and PostgreSQL? Give database.listen a connection string straight to PostgreSQL (or listen: false)'), 'listen');
      }
    } catch {
      // The pool failed to send it: its own callers hear of that, and a LISTEN connection made again is asked again.
    } finally {
      clearTimeout(timer);
    }
  }

  async notify(channel: string, payload: string): Promise<void> {
    // Never on the application's pool: a wake-up must not take a connection from it nor wait
    // behind its transactions. On the LISTEN connection when there is one (it is idle between
    // notifications), otherwise on a connection of its own, opened on the first wake-up of a
    // process that only records. A pg client runs one query at a time, so while one wake-up is in
    // flight the next ones wait here, each (channel, payload) once: a wake-up sent twice wakes
    // nobody more.
    this.notifyQueue.set(`${channel}\0${payload}`, [channel, payload]);
    if (this.notifying) return;
    this.notifying = true;
    try {
      while (this.notifyQueue.size > 0) {
        const [key, [c, p]] = this.notifyQueue.entries().next().value as [string, [string, string]];
        this.notifyQueue.delete(key);
        await this.sendNotify(c, p);
      }
    } finally {
      this.notifying = false;
    }
  }

  private async sendNotify(channel: string, payload: string): Promise<void> {
    const text = wakeupNotify(pg.escapeLiteral(channel), pg.escapeLiteral(payload));
    if (await this.notifyOnListener(text)) return;
    if (this.closed) return;
    const used = this.notifier ?? this.connectNotifier();
    try {
      // Past the deadline the connection is dropped: its error handler retires it, and the next wake-up opens another.
      await queryWithin(await used, text, this.queryTimeoutMs);
    } catch (err) {
      if (this.closed) return; // a wake-up cut short by close() is no failure
      // A LISTEN connection that came up while this wake-up was in flight retires the notifier
      // (closeNotifier ends it under the query): send it there instead.
      if (this.notifier !== used && (await this.notifyOnListener(text))) return;
      throw err;
    }
  }

  /** Sends on a LISTEN connection when there is one; false when there is none or it just failed. */
  private async notifyOnListener(text: string): Promise<boolean> {
    const listening = this.listeners.map((l) => l.client()).find((c) => c !== undefined);
    if (!listening) return false;
    try {
      await this.onListener(listening, text);
      return true;
    } catch {
      return false; // the listen connection just failed (its error handler reconnects it)
    }
  }

  /**
   * One statement on a LISTEN connection, after those before it (wake-ups and its checks share it,
   * and node-postgres wants one query at a time), within the deadline; past it, the connection is
   * dropped and its error handler reconnects it.
   */
  private onListener(c: pg.Client, text: string): Promise<unknown> {
    const run = () => queryWithin(c, text, this.queryTimeoutMs);
    const tail = (this.listenerTails.get(c) ?? Promise.resolve()).then(run, run);
    this.listenerTails.set(c, tail.catch(() => {}));
    return tail;
  }

  /** The wake-up connection of a process that does not listen; dropped when it fails, reopened on the next wake-up. */
  private connectNotifier(): Promise<pg.Client> {
    const c = this.ownClient('rea-notify', 'listen');
    const opened = c.connect().then(() => c);
    this.notifier = opened;
    c.on('error', (err) => {
      this.options.onError(err, 'notify');
      if (this.notifier === opened) this.closeNotifier();
    });
    opened.catch(() => {
      if (this.notifier === opened) this.notifier = undefined;
      c.end().catch(() => {});
    });
    return opened;
  }

  private closeNotifier(): void {
    const n = this.notifier;
    this.notifier = undefined;
    n?.then((c) => c.end()).catch(() => {});
  }

  /**
   * Runs a /healthz read on a connection of its own, outside the pool, within `timeoutMs`. On the
   * pool, each probe's ping held a connection for as long as the server did not answer, and the
   * probes that followed queued for more: during a stall, probes every few seconds took the whole
   * pool, and a connection the stall had killed without a word (a failover, a NAT entry dropped)
   * stayed checked out until TCP gave up, ~15 min later, while the relay, the workers and the
   * application's bus.transaction waited. A liveness probe must not take the capacity it checks,
   * nor fail because the pool is busy with real work. So: one connection, opened by the first
   * check and kept while checks get answers (no new connection per probe), and dropped, not
   * waited for, when one does not, so that the next probe asks afresh.
   */
  private async healthRun<T>(fn: (q: Queryable) => Promise<T>, timeoutMs: number): Promise<T> {
    if (this.closed) throw new Error('the driver is closed');
    const health = this.health ?? this.connectHealth();
    try {
      return await within(health.opened.then((c) => fn(c as unknown as Queryable)), timeoutMs);
    } catch (err) {
      this.dropHealth(health);
      throw err;
    }
  }

  private connectHealth(): NonNullable<PostgresDriver['health']> {
    const client = this.ownClient('rea-health');
    const health = { client, opened: client.connect().then(() => client) };
    this.health = health;
    client.on('error', () => this.dropHealth(health)); // the next check reconnects; its caller hears "down"
    health.opened.catch(() => this.dropHealth(health));
    return health;
  }

  private dropHealth(health: NonNullable<PostgresDriver['health']>): void {
    if (this.health === health) this.health = undefined;
    // end() alone sends Terminate and waits for the server's side to close, which a connection
    // that has gone quiet may never do: destroy the socket too (still connecting, or not).
    health.client.end().catch(() => {});
    dropConnection(health.client);
  }

  /** A connection outside the pool, with the pool's settings, or database.listen's for the LISTEN and wake-up connections. */
  private ownClient(applicationName: string, use?: 'listen'): pg.Client {
    const [url, socket] = use === 'listen' && typeof this.options.listen === 'string'
      ? [this.options.listen, this.listenSocket]
      : [this.connectionString, this.socket];
    return url
      ? new pg.Client({ connectionString: url, application_name: applicationName, ...socket })
      : new pg.Client({ ...(this.pool as unknown as { options: pg.ClientConfig }).options, application_name: applicationName });
  }

  async close(): Promise<void> {
    this.closed = true;
    this.closeNotifier();
    if (this.health) this.dropHealth(this.health);
    await Promise.all(this.listeners.map((l) => l.close()));
    this.listeners = [];
    if (!this.ownsPool) return;
    // pool.end() waits for every checked-out connection. By now the relay and workers have
    // stopped, so one still busy is stuck (a lock wait, a hung server): close() does not wait
    // for it past CLOSE_WAIT_MS; the pool ends it when its query returns.
    let timer: NodeJS.Timeout | undefined;
    const ended = this.pool.end().then(() => true);
    const gaveUp = new Promise<false>((r) => (timer = setTimeout(() => r(false), CLOSE_WAIT_MS)));
    if (!(await Promise.race([ended, gaveUp]))) {
      this.options.onError(new Error(`closing: ${this.pool.totalCount - this.pool.idleCount} connection(s) still busy after ${CLOSE_WAIT_MS} ms (a query waits on a lock or a server that does not answer); not waiting for them`), 'close');
    }
    clearTimeout(timer);
  }
}

/**
 * What pg.escapeLiteral returns, built with two replaceAll calls: pg's version appends one
 * character at a time, and for 200 MB of payloads (20,000 events of 10 KB in one
 * bus.transaction) those appends took the process past its 4 GB heap.
 */
function escapeLiteral(value: string): string {
  const quoted = value.replaceAll("'", "''");
  return value.includes('\\') ? ` E'${quoted.replaceAll('\\', '\\\\')}'` : `'${quoted}'`;
}

/** Why rea closed an idle pool connection: a statement on another one got no answer within its deadline. */
class ClosedAfterDeadline extends Error {
  constructor() {
    super('closed by rea: a statement on another connection of the pool got no answer within its deadline');
    this.name = 'ClosedAfterDeadline';
  }
}
