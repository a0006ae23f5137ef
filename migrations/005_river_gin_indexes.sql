-- 005: River's GIN indexes on river_job.args and river_job.metadata go.
--
-- No query of ours or of River's work loop reads them (River's own fetch,
-- completion, rescue and cleanup use its B-tree indexes); they serve ad-hoc
-- searches by argument or metadata, which River UI does not make either. Yet
-- every job writes both three times: each of its state changes (inserted,
-- running, completed) updates an indexed column, so none is HOT, and each
-- new row version adds its args and metadata to both inverted indexes. At
-- the design's 2,000 labels a second that is 12,000 GIN insertions a second
-- for nothing (docs/bench.md, "The morning").
--
-- River keeps working without them: cmd/worker leaves them out of River's
-- reindexer (ReindexerIndexNames), which would otherwise warn that they are
-- missing. A River migration of a later version that touches them by name
-- would have to be read before it is applied.
DROP INDEX IF EXISTS river_job_args_index;
DROP INDEX IF EXISTS river_job_metadata_index;
