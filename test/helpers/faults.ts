// Fault injection in the real database, for tests that need an event the relay cannot fan out.
import type { Target } from './db.js';

/**
 * Make inserting any job for an event whose payload has orderNo = `orderNo` fail, with SQLSTATE
 * `errcode` (default P0001, a plain raise; '57014' is what a statement_timeout raises); returns the undo.
 */
export async function rejectJobsFor(target: Target, schema: string, orderNo = 'BOOM', errcode = 'P0001'): Promise<() => Promise<void>> {
  const s = `"${schema}"`;
  const literal = `'${orderNo.replace(/'/g, "''")}'`;
  if (!/^[0-9A-Z]{5}$/.test(errcode)) throw new Error(`not a SQLSTATE: ${errcode}`);
  await target.query(`
    create function ${s}.reject_order() returns trigger language plpgsql as $$
    begin
      if exists (select 1 from ${s}.events where id = new.event_id and payload->>'orderNo' = ${literal}) then
        raise exception 'downstream constraint rejects %', ${literal} using errcode = '${errcode}';
      end if;
      return new;
    end $$;
    create trigger reject_order before insert on ${s}.jobs for each row execute function ${s}.reject_order();`);
  return async () => {
    await target.query(`drop trigger reject_order on ${s}.jobs`);
  };
}
