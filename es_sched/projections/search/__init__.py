"""The search read model: one client port over OpenSearch 2 and Elasticsearch 8, store, rebuild."""
