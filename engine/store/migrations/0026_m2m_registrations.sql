-- 0026: the OAuth clients the engine registered for its handler identities (RFC 7591).
--
-- Why: a handler profile may register its client at boot with its certificate instead of being
-- given a client id. Every engine node must then use the same client, so the registration lives
-- here, not in one node's memory: the first node to boot registers (under an advisory lock, so
-- two nodes booting at once register once) and the others read the row. `sealed` holds client id
-- and secret encrypted with FLOW_SECRETS_KEY (AES-256-GCM, nonce ‖ tag ‖ ciphertext), so a dump
-- of the database does not hand out the engine's credentials. `fingerprint` is what was
-- registered (method, issuer, certificate thumbprint): a new certificate registers again.
-- The rows belong to no env: only the engine role reads or writes them.

CREATE TABLE m2m_registrations (
  identity      text        PRIMARY KEY,
  fingerprint   text        NOT NULL,
  sealed        bytea       NOT NULL,
  registered_at timestamptz NOT NULL DEFAULT now()
);

ALTER TABLE m2m_registrations ENABLE ROW LEVEL SECURITY;
ALTER TABLE m2m_registrations FORCE ROW LEVEL SECURITY;
CREATE POLICY scheduler ON m2m_registrations TO flow_engine USING (true) WITH CHECK (true);
GRANT SELECT, INSERT, UPDATE ON m2m_registrations TO flow_engine;
