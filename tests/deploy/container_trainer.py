"""A Python training consumer, run in the image with Python (deploy/build-image.sh --python) by
tests/deploy/container_test.py, as docs/deploy.md shows:

    podman run --rm --network stoker -v $PWD/job:/job:ro localhost/stoker:python \
        /job/container_trainer.py stoker-dispatcher:5000 /data 2 100

Reads the stoker dataset DATASET (its path or URL as the workers see it: this process never opens
it) through the stoker service at DISPATCHER (Pipeline.distribute) for EPOCHS epochs of one job,
spends STEP_MS on each element (a simulated training step) and prints the key of every element it
receives, one a line, in delivery order; on stderr, what each epoch got.

Usage: container_trainer.py DISPATCHER DATASET EPOCHS STEP_MS
"""
import sys
import time

import stoker

dispatcher, dataset, epochs, step_ms = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
print(f"stoker {stoker.__version__} (commit {stoker.__git_commit__}), Python "
      f"{sys.version.split()[0]}", file=sys.stderr, flush=True)
# stoker.dataset() builds the pipeline without opening the data (stoker.from_spec would validate
# it by opening the dataset, which only the workers can).
served = stoker.dataset(dataset).distribute(dispatcher=dispatcher, num_epochs=epochs)
for epoch in range(epochs):
    count = 0
    for element in served:
        for key in element["__keys__"]:
            print(key, flush=True)
        count += len(element["__keys__"])
        time.sleep(step_ms / 1000)
    print(f"epoch {epoch}: {count} keys", file=sys.stderr, flush=True)
served.close()
