import { query, type Queryable } from '../db/pool.js';
import type { Role } from '../../../shared/principal.js';

/**
 * SQL of users.users, the API's mirror of the identity provider's users (id, contact address, role).
 * Each function returns rows aliased to camelCase.
 */

export interface UserRow {
  id: string;
  email: string | null;
  name: string | null;
  role: Role;
  firstSeenAt: string;
  updatedAt: string;
}

const COLUMNS = `id, email, name, role,
  to_char(first_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "firstSeenAt",
  to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS "updatedAt"`;

/**
 * Record a caller on sight. Contact details always follow the credentials; the role only when
 * `roleIsAuthoritative` (a Kratos session, whose role is metadata_public read moments ago). A token
 * carries the role of the moment it was issued, so an older token must not undo an admin's change;
 * its role is used for a user seen the first time only. Rows that would not change are not written.
 */
export async function upsertSeenUser(
  db: Queryable,
  user: { id: string; email: string | null; name: string | null; role: Role },
  roleIsAuthoritative: boolean,
): Promise<void> {
  await query(db, {
    text: `INSERT INTO users.users AS u (id, email, name, role) VALUES ($1::text, $2::text, $3::text, $4::text)
     ON CONFLICT (id) DO UPDATE SET
       email = coalesce(EXCLUDED.email, u.email),
       name = coalesce(EXCLUDED.name, u.name),
       role = CASE WHEN $5::boolean THEN EXCLUDED.role ELSE u.role END,
       updated_at = now()
     WHERE (u.email, u.name) IS DISTINCT FROM (coalesce(EXCLUDED.email, u.email), coalesce(EXCLUDED.name, u.name))
        OR ($5::boolean AND u.role IS DISTINCT FROM EXCLUDED.role)`,
    values: [user.id, user.email, user.name, user.role, roleIsAuthoritative],
  });
}

export async function listUsers(db: Queryable, filter: { role?: Role | undefined; after?: string | undefined; limit: number }): Promise<UserRow[]> {
  const { rows } = await query(db, {
    text: `SELECT ${COLUMNS} FROM users.users
     WHERE ($1::text IS NULL OR role = $1::text) AND ($2::text IS NULL OR id > $2::text)
     ORDER BY id LIMIT $3::int`,
    values: [filter.role ?? null, filter.after ?? null, filter.limit],
  });
  return rows as UserRow[];
}

/** The row locked for the rest of the transaction, so two role changes of one user run one after the other. */
export async function lockUser(db: Queryable, id: string): Promise<UserRow | undefined> {
  const { rows } = await query(db, { text: `SELECT ${COLUMNS} FROM users.users WHERE id = $1::text FOR UPDATE`, values: [id] });
  return rows[0] as UserRow | undefined;
}

/** Insert or update a user with an explicit role (an admin's decision), returning the row. */
export async function saveUserRole(db: Queryable, user: { id: string; email: string | null; name: string | null; role: Role }): Promise<UserRow> {
  const { rows } = await query(db, {
    text: `INSERT INTO users.users AS u (id, email, name, role) VALUES ($1::text, $2::text, $3::text, $4::text)
     ON CONFLICT (id) DO UPDATE SET role = EXCLUDED.role, email = coalesce(EXCLUDED.email, u.email),
       name = coalesce(EXCLUDED.name, u.name), updated_at = now()
     RETURNING ${COLUMNS}`,
    values: [user.id, user.email, user.name, user.role],
  });
  return rows[0] as UserRow;
}
