-- 003: the category mapping of the QC exports, as data.
--
-- Which OSM tags and which Wikidata class (P31) a kategorie gets when an approved feature is
-- exported. The exporters read this table for every job, so changing a mapping needs no deploy.
-- A category without a class (wikidata_class NULL) gets no Wikibase item (outcome not_applicable).
CREATE TABLE metadata.category_mapping (
  kategorie text PRIMARY KEY,
  osm_tags jsonb NOT NULL CHECK (jsonb_typeof(osm_tags) = 'object'),
  wikidata_class text CHECK (wikidata_class IS NULL OR wikidata_class ~ '^Q[1-9][0-9]*$'),
  updated_at timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE metadata.category_mapping IS 'kategorie -> OSM tags and Wikidata class for the QC exports (Q39614 cemetery, Q4989906 monument).';

INSERT INTO metadata.category_mapping (kategorie, osm_tags, wikidata_class) VALUES
  ('friedhof', '{"landuse": "cemetery"}', 'Q39614'),
  ('blumenbeet', '{"landuse": "flowerbed"}', NULL),
  ('denkmal', '{"historic": "memorial"}', 'Q4989906');
