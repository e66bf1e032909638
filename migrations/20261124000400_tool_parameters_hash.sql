-- An admin's accept or reject binds to what the admin saw: the tool's class,
-- description and parameters. The parameters are kept as a hash; '' means
-- "not known yet" (rows from before this column).
ALTER TABLE agent_tools ADD COLUMN parameters_hash TEXT NOT NULL DEFAULT '';
