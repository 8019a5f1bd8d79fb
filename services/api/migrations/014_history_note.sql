-- 014: a note on a version in the history.
--
-- Why: an edit can say why it was made. The web app's offline sync resolves a conflict with a
-- three-way merge and saves the result as a new version; without a note that version looked like any
-- other edit by the offline user. Now it says "merged offline edit: name from mine, telefon from
-- theirs", so a resolved conflict is never silent.
--
-- The writer sets the transaction-local setting app.edit_note (the API does for a PUT with
-- X-Edit-Note); the history trigger stores it with the row. Other writers (WFS-T, psql) set nothing and
-- their rows have no note.
ALTER TABLE history.feature_versions
  ADD COLUMN IF NOT EXISTS note text CHECK (note IS NULL OR char_length(note) BETWEEN 1 AND 500);

COMMENT ON COLUMN history.feature_versions.note IS 'Why this version was made, as the writer said (app.edit_note), e.g. the outcome of an offline merge; NULL when none was given.';

-- As in 006, plus the note.
CREATE OR REPLACE FUNCTION history.record_feature_version() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
DECLARE
  row_state features.features;
BEGIN
  IF TG_OP = 'UPDATE' AND features.is_status_only_change(OLD, NEW) THEN
    RETURN NULL; -- recorded in qc.transitions instead
  END IF;
  row_state := CASE WHEN TG_OP = 'DELETE' THEN OLD ELSE NEW END;
  INSERT INTO history.feature_versions (feature_id, version, operation, actor, snapshot, note)
  VALUES (
    row_state.id,
    row_state.version,
    lower(TG_OP),
    features.current_actor(),
    (to_jsonb(row_state) - 'geom' - 'geojson') || jsonb_build_object('geometry', ST_AsGeoJSON(row_state.geom)::jsonb),
    nullif(current_setting('app.edit_note', true), '')
  );
  RETURN NULL;
END
$$;
