from tests.kafka_cleanup import delete_new_topics  # noqa: F401 - autouse fixture
