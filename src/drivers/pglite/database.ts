// What rea uses of a PGlite database, as a structural type. The public `database: { pglite }`
// takes it instead of PGlite's own class, whose declarations need Emscripten's types: with it in
// rea's declarations, an application compiling with skipLibCheck: false failed on them
// ("Cannot find namespace 'Emscripten'"), PGlite or not. A PGlite instance fits it (the driver
// assigns one it makes itself to it, so a PGlite that stopped fitting would not compile).

/** A PGlite transaction (the `tx` of `db.transaction(async (tx) => …)`), as rea uses it. */
export interface PGliteTransactionLike {
  query<T>(query: string, params?: unknown[]): Promise<{ rows: T[] }>;
  exec(query: string): Promise<unknown>;
}

/** A PGlite database (`new PGlite(…)`), as rea uses it. */
export interface PGliteDatabase {
  readonly waitReady: Promise<void>;
  readonly closed: boolean;
  query<T>(query: string, params?: unknown[]): Promise<{ rows: T[] }>;
  exec(query: string): Promise<unknown>;
  transaction<T>(callback: (tx: PGliteTransactionLike) => Promise<T>): Promise<T>;
  listen(channel: string, callback: (payload: string) => void): Promise<() => Promise<void>>;
  close(): Promise<void>;
}
