-- 009: what the review checks need (docs/qc.md "Review checks").
--
-- qc.name_similarity(a, b) compares two names for the duplicate-candidate check, from 0 (nothing in
-- common) to 1 (the same words). It is pg_trgm's similarity() where the extension can be installed
-- (PostGIS images ship it), otherwise the same measure in SQL: the share of common trigrams of the
-- lower-cased words, each padded with two spaces in front and one behind (how pg_trgm forms them).
-- Either way the callers see one function and one scale.

CREATE FUNCTION qc.name_trigrams(s text) RETURNS text[]
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  AS $$
    SELECT coalesce(array_agg(DISTINCT substr(padded, i, 3)), '{}'::text[])
    FROM regexp_split_to_table(lower(coalesce(s, '')), '[^[:alnum:]]+') AS word
    CROSS JOIN LATERAL (SELECT '  ' || word || ' ' AS padded) p
    CROSS JOIN LATERAL generate_series(1, char_length(padded) - 2) AS i
    WHERE word <> ''
  $$;

DO $$
DECLARE
  trgm_schema text;
BEGIN
  BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
  EXCEPTION WHEN OTHERS THEN
    RAISE NOTICE 'pg_trgm cannot be installed (%); qc.name_similarity uses its SQL form', SQLERRM;
  END;
  SELECT n.nspname INTO trgm_schema FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_trgm';
  IF trgm_schema IS NOT NULL THEN
    EXECUTE format('CREATE FUNCTION qc.name_similarity(a text, b text) RETURNS real LANGUAGE sql IMMUTABLE PARALLEL SAFE AS %L',
                   format('SELECT %I.similarity(a, b)', trgm_schema));
  ELSE
    CREATE FUNCTION qc.name_similarity(a text, b text) RETURNS real
      LANGUAGE sql IMMUTABLE PARALLEL SAFE
      AS $f$
        SELECT CASE WHEN cardinality(x.ta) + cardinality(x.tb) = 0 THEN 0::real
                    ELSE (c.common::real / (cardinality(x.ta) + cardinality(x.tb) - c.common))::real END
        FROM (SELECT qc.name_trigrams(a) AS ta, qc.name_trigrams(b) AS tb) x
        CROSS JOIN LATERAL (SELECT count(*)::int AS common FROM unnest(x.ta) t WHERE t = ANY (x.tb)) c
      $f$;
  END IF;
END
$$;

-- "My submissions" reads a contributor's submit transitions.
CREATE INDEX transitions_submitter_idx ON qc.transitions (actor, id DESC) WHERE action = 'submit';
