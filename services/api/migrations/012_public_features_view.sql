-- 012: what anonymous map readers may see (GeoServer WMS/WFS publish this view, not the table).
--
-- Only approved features, and only the columns a visitor needs: never telefon, never who created or
-- changed a feature (created_by, updated_by hold platform user ids), never a draft's adresse (drafts are
-- not in the view at all). GeoServer reads the view for anonymous requests; the table layer is for
-- authenticated editors only (infra/geoserver/provision.ts sets the ACL). security_barrier keeps a
-- caller's filter functions from seeing rows the WHERE clause removes.

CREATE VIEW features.public_features WITH (security_barrier) AS
  SELECT id, name, kategorie, adresse, geom, version, updated_at
  FROM features.features
  WHERE status = 'approved';

COMMENT ON VIEW features.public_features IS 'Approved features without contact or author columns: the layer anonymous WMS/WFS readers get.';
