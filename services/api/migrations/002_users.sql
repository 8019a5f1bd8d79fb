-- 002: the platform's users as the API knows them.
--
-- The identity provider (Ory Kratos) owns accounts and credentials; this table mirrors what the
-- platform needs locally: the role (kept in step with Kratos metadata_public by PUT
-- /api/users/:id/role) and the contact address used for reviewer notices. A row is written when
-- a caller authenticates (first sight or changed claims) and when an admin sets a role.
CREATE TABLE users.users (
  id text PRIMARY KEY CHECK (char_length(id) BETWEEN 1 AND 255),
  email text CHECK (email IS NULL OR char_length(email) <= 320),
  name text CHECK (name IS NULL OR char_length(name) <= 255),
  role text NOT NULL DEFAULT 'guest' CHECK (role IN ('guest', 'contributor', 'reviewer', 'admin')),
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Reviewer notices select by role; only users with an address are useful there.
CREATE INDEX users_role_with_email_idx ON users.users (role) WHERE email IS NOT NULL;

COMMENT ON TABLE users.users IS 'Platform users mirrored from the identity provider: role and contact address.';
