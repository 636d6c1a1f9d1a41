"""The shared fixtures themselves work: the throwaway PostgreSQL answers."""

import psycopg2


def test_postgres_server_answers(postgres_url):
    with psycopg2.connect(postgres_url) as conn, conn.cursor() as cur:
        cur.execute("select current_setting('server_version_num')::int")
        assert cur.fetchone()[0] // 10000 == 15
