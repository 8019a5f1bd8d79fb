// Claims mapper for GitHub (Kratos' `github` provider): Kratos asks GitHub for the user and its primary
// verified e-mail address (scope user:email) and passes them as std.extVar('claims').
//
// Maps the e-mail address and the name (the login when no name is set); the address is verified when
// GitHub says so. Never a role or other metadata (`npm run identity:check` refuses a mapper that tries).
local claims = std.extVar('claims');
local email = if 'email' in claims then claims.email else null;
local verified = 'email_verified' in claims && claims.email_verified == true;
local name =
  if 'name' in claims && claims.name != '' then claims.name
  else if 'nickname' in claims then claims.nickname
  else email;

{
  identity: {
    traits: std.prune({ email: email, name: name }),
    verified_addresses: if email != null && verified then [{ via: 'email', value: email }] else [],
  },
}
