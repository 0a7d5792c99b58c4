// Apart from run.ts so that the CLI's usage list does not load the engine (pg, prom-client) for every command.
export const RUN_USAGE = 's8flow run <logic.json|dir> --input <json|@file> [--handler NAME=URL]... [--allow-host HOST]... [--json]';
