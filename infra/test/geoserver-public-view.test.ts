import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../../test/helpers/db.js';

/**
 * The view GeoServer publishes to anonymous readers (migration 012), on a real PostGIS: what an
 * anonymous WMS GetFeatureInfo or WFS GetFeature could ever return.
 */

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase();
  const insert = `INSERT INTO features.features (name, kategorie, adresse, telefon, geom, created_by)
    VALUES ($1, 'denkmal', $2, '+49 30 1234567', ST_SetSRID(ST_MakePoint(13.4, 52.5), 4326), 'user-7f3a') RETURNING id`;
  const approved = await db.pool.query<{ id: string }>(insert, ['Approved monument', 'Public square 1']);
  await db.pool.query<{ id: string }>(insert, ['Draft monument', 'Private home 7']);
  await db.pool.query("UPDATE features.features SET status = 'approved' WHERE id = $1", [approved.rows[0]?.id]);
}, 120_000);
afterAll(async () => {
  await db?.close();
});

describe('features.public_features (what anonymous map readers get)', () => {
  it('holds only approved features', async () => {
    const { rows } = await db.pool.query<{ name: string }>('SELECT name FROM features.public_features ORDER BY name');
    expect(rows.map((r) => r.name)).toEqual(['Approved monument']);
  });

  it('never has telefon, created_by or updated_by, and no draft\'s adresse', async () => {
    const { rows } = await db.pool.query<{ column_name: string }>(
      "SELECT column_name FROM information_schema.columns WHERE table_schema = 'features' AND table_name = 'public_features' ORDER BY ordinal_position",
    );
    expect(rows.map((r) => r.column_name)).toEqual(['id', 'name', 'kategorie', 'adresse', 'geom', 'version', 'updated_at']);
    const all = JSON.stringify((await db.pool.query('SELECT * FROM features.public_features')).rows);
    expect(all).not.toContain('Private home 7');
    expect(all).not.toContain('+49 30');
    expect(all).not.toContain('user-7f3a');
  });
});
