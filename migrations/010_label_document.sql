-- 010: the label document (the PDF or ZPL to print) that the carrier names in
-- its purchase answer: where to fetch it, its media type and its size. Owned
-- by package postgres, like the rest of labels.
--
-- NULL for a label whose carrier named no document (the protocol's field is
-- optional) and for labels bought before this migration. Nullable columns
-- without a default: adding them rewrites nothing.
ALTER TABLE labels
    ADD COLUMN document_url          text,
    ADD COLUMN document_content_type text,
    ADD COLUMN document_size_bytes   bigint;

-- A document is named whole or not at all.
ALTER TABLE labels ADD CONSTRAINT labels_document_whole CHECK (
    (document_url IS NULL AND document_content_type IS NULL AND document_size_bytes IS NULL)
    OR (document_url <> '' AND document_content_type <> '' AND document_size_bytes >= 0)) NOT VALID;
