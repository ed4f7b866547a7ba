"""The PostgreSQL read model: SQLAlchemy models, Alembic migrations, the store, queries, rebuild."""
