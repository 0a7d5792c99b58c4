-- 0035: bulk jobs may run the migrate verb.
--
-- Why: moving instances of a version to a later one (POST …/migrations) runs as a server-side bulk
-- job, with progress and a result per instance, exactly as retry, cancel and replay do. Its
-- arguments (the versions, the rename map) ride in `args`, as theirs do.
ALTER TABLE bulk_jobs DROP CONSTRAINT bulk_jobs_verb_check;
ALTER TABLE bulk_jobs ADD CONSTRAINT bulk_jobs_verb_check CHECK (verb IN ('retry', 'cancel', 'replay', 'migrate'));
