-- 0007: the API lists an env's instances newest first, a page at a time, keyed on
-- (created_at, id) so a deep page costs what the first does. This index serves that order.
CREATE INDEX workflows_listing ON workflows (env_id, created_at DESC, id DESC);
