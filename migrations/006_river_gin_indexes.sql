-- 006: River's GIN indexes on river_job.args and river_job.metadata, as
-- River's own migrations create them, for a database where an earlier
-- version of this project had dropped them. River's schema is River's: the
-- project no longer changes it. On a fresh database this does nothing.
CREATE INDEX IF NOT EXISTS river_job_args_index ON river_job USING GIN (args);
CREATE INDEX IF NOT EXISTS river_job_metadata_index ON river_job USING GIN (metadata);
