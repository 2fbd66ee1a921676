// Operator actions over an unbounded set of rows (retry every dead letter, requeue every poisoned
// event, cancel a forgotten handler's waiting jobs) go in batches: one statement, so one
// transaction, per batch of at most OPERATOR_BATCH rows. One statement for all of them locked a
// whole outage's rows at once, and a statement_timeout undid it every time.

/** Rows an operator action takes per statement. */
export const OPERATOR_BATCH = 1000;

/** What one batch did: the rows it changed, how many it looked at, and where it ended. */
export interface Batch<C, T> {
  done: T[];
  held: number;
  last: C;
}

/**
 * Run `step` from the cursor `from`, each batch from where the last one ended, until one held
 * fewer than `size` rows. A batch is chosen before its checks, so one whose rows were all left
 * alone still goes on; a row a batch changed is behind the cursor and is not taken twice.
 */
export async function inBatches<C, T>(from: C, step: (after: C, size: number) => Promise<Batch<C, T>>, size = OPERATOR_BATCH): Promise<T[]> {
  const done: T[] = [];
  for (let after = from; ;) {
    const b = await step(after, size);
    done.push(...b.done);
    if (b.held < size) return done;
    after = b.last;
  }
}
