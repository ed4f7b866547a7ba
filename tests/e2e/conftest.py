"""The e2e suite: every test cleans up the topics it created."""

from testkit.kafka import delete_new_topics  # noqa: F401 - autouse fixture
