-- One database per brain, created on the first start of the compose file's PostgreSQL (its
-- entrypoint runs this as the superuser cnbrain). `migrate` then creates the tables.
CREATE DATABASE cnbrain_national;
CREATE DATABASE cnbrain_east;
CREATE DATABASE cnbrain_west;
CREATE DATABASE cnbrain_north;
CREATE DATABASE cnbrain_south;
