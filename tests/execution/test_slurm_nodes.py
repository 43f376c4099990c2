"""Slurm's node list read into node reports: GPUs by type from every GRES form it prints."""

from cnbrain.execution.slurm_payloads import gpu_counts, nodes_from


def test_gpu_counts_read_every_form_slurm_prints() -> None:
    assert gpu_counts("gpu:fake:4") == {"fake": 4}
    assert gpu_counts("gpu:fake:0(IDX:N/A)") == {"fake": 0}
    assert gpu_counts("gpu:a100:4(S:0-1),gpu:t4:2,mps:100") == {"a100": 4, "t4": 2}
    assert gpu_counts("gpu:2") == {"": 2}
    assert gpu_counts(None) == gpu_counts("") == gpu_counts("gpu:x:many") == {}


def test_a_node_list_keeps_named_nodes_and_what_jobs_hold() -> None:
    body = {
        "nodes": [
            {
                "name": "n1",
                "state": "mixed",
                "cpus": 64,
                "alloc_cpus": 16,
                "real_memory": 512_000,
                "alloc_memory": 64_000,
                "gres": "gpu:a100:8",
                "gres_used": "gpu:a100:3(IDX:0-2)",
            },
            {"state": "idle"},
            "not a node",
        ]
    }
    [node] = nodes_from(body)
    assert (node.name, node.state, node.cpus, node.cpus_allocated) == ("n1", "mixed", 64, 16)
    assert (node.memory_mib, node.memory_allocated_mib) == (512_000, 64_000)
    assert node.gpus == {"a100": 8} and node.free_gpus == {"a100": 5}
