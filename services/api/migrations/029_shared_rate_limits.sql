-- 029: the change limit's counters in the database, so every API process counts against one budget.
--
-- Why: the limit (RATE_LIMIT_WRITES_PER_MINUTE) lived in each process' memory, so N replicas behind
-- the proxy let a user make N times the limit. One row per key (`user:<id>` or `ip:<address>`, see
-- services/api/src/http/rate-limit-key.ts) with its count and the end of its fixed window; the API
-- increments it with one INSERT … ON CONFLICT DO UPDATE (http/rate-limit-store.ts), atomic under
-- concurrency, and deletes a few expired rows on the way.
CREATE TABLE http.rate_limits (
  key text PRIMARY KEY,
  hits integer NOT NULL,
  window_ends timestamptz NOT NULL
);

CREATE INDEX rate_limits_window_ends_idx ON http.rate_limits (window_ends);

COMMENT ON TABLE http.rate_limits IS 'The change limit''s fixed-window counters, shared by every API process.';
