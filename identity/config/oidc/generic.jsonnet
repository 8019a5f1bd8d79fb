// Claims mapper for OpenID Connect providers with discovery (Microsoft Entra ID, Keycloak, any issuer):
// Kratos evaluates it with the provider's claims as std.extVar('claims') on every social sign-in.
//
// It maps the e-mail address and the name into the identity's traits, and marks the address verified
// only when the provider says it verified it (email_verified). It never sets metadata_public or any
// other metadata: the platform role is granted by an administrator, never by a provider
// (`npm run identity:check` refuses a mapper that tries).
local claims = std.extVar('claims');
local email = if 'email' in claims then claims.email else null;
local verified = 'email_verified' in claims && claims.email_verified == true;
local name =
  if 'name' in claims && claims.name != '' then claims.name
  else if 'given_name' in claims && 'family_name' in claims then claims.given_name + ' ' + claims.family_name
  else if 'preferred_username' in claims then claims.preferred_username
  else email;

{
  identity: {
    traits: std.prune({ email: email, name: name }),
    verified_addresses: if email != null && verified then [{ via: 'email', value: email }] else [],
  },
}
