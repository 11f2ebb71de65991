"""The circuit as a subgraph of `models.graph`: the exact patcher (oracle), the fast methods that
approximate it, circuit search, faithfulness, planted ground truth, labels."""
