"""Pipeline: a JSON spec (docs/pipeline.md), built from a dict, a file or the op builder, and run
in-process by stoker's C++ engine.

A Pipeline is immutable: every builder method returns a new Pipeline with one more op, so partial
pipelines can be shared. The spec is compiled (validated) on first use, or at once by from_spec.
Thread safety: a Pipeline may be shared between threads; an Iterator is used by one thread at a time.
"""
import copy
import json
import os

from . import _length, _stoker

# Functions of Pipeline.map in this process, by the name the spec's python_map op carries.
_python_functions = {}


class Pipeline:
    def __init__(self, spec):
        if not isinstance(spec, dict):
            raise TypeError(f"a pipeline spec is a dict, got {type(spec).__name__}")
        self._spec = spec
        self._compiled = None

    # --- construction -------------------------------------------------------------------------
    @classmethod
    def from_spec(cls, spec):
        """A Pipeline from a spec dict, a path to a JSON file, or JSON text; validated now
        (ValueError naming the JSON path, e.g. "$.ops[2].size", for a bad spec)."""
        if isinstance(spec, (str, os.PathLike)):
            text = str(spec)
            if not text.lstrip().startswith("{"):
                with __import__("builtins").open(text, encoding="utf-8") as f:
                    text = f.read()
            try:
                spec = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"pipeline spec is not valid JSON: {e}") from None
        pipe = cls(copy.deepcopy(spec))
        pipe._compile()
        return pipe

    @property
    def spec(self):
        """The JSON spec (a copy) — the same spec runs with `stoker run SPEC.json` or the service."""
        return copy.deepcopy(self._spec)

    def to_json(self, indent=None):
        return json.dumps(self._spec, indent=indent)

    def with_options(self, **options):
        """Top-level spec keys: seed, deterministic, threads, memory_budget_mb, plugins."""
        spec = copy.deepcopy(self._spec)
        spec.update(options)
        return Pipeline(spec)

    def op(self, name, **params):
        """Appends any op (including plugin ops) by name."""
        spec = copy.deepcopy(self._spec)
        spec.setdefault("ops", []).append({"op": name, **params})
        return Pipeline(spec)

    # The builder mirrors the ops of docs/pipeline.md; parameters keep their spec names.
    def shuffle(self, seed=None, buffer=None, reshuffle_each_epoch=None):
        return self.op("shuffle", **_given(seed=seed, buffer=buffer,
                                           reshuffle_each_epoch=reshuffle_each_epoch))

    def decode_image(self, field, channels=None, on_error=None):
        return self.op("decode_image", field=field, **_given(channels=channels, on_error=on_error))

    def resize(self, field, size=None, shorter_side=None):
        return self.op("resize", field=field, **_given(size=size, shorter_side=shorter_side))

    def center_crop(self, field, size):
        return self.op("center_crop", field=field, size=size)

    def random_resized_crop(self, field, size, scale=None, ratio=None, dct_scale=None):
        return self.op("random_resized_crop", field=field, size=size,
                       **_given(scale=scale, ratio=ratio, dct_scale=dct_scale))

    def flip(self, field, p=None, direction=None):
        return self.op("flip", field=field, **_given(p=p, direction=direction))

    def normalize(self, field, mean=None, std=None, layout=None, scale=None, dtype=None):
        return self.op("normalize", field=field,
                       **_given(mean=mean, std=std, layout=layout, scale=scale, dtype=dtype))

    def cast(self, field, to):
        return self.op("cast", field=field, to=to)

    def filter(self, field, **params):
        return self.op("filter", field=field, **params)

    def map_field(self, rename=None, drop=None, keep=None):
        return self.op("map_field", **_given(rename=rename, drop=drop, keep=keep))

    def batch(self, size, drop_remainder=None):
        return self.op("batch", size=size, **_given(drop_remainder=drop_remainder))

    def padded_batch(self, size, drop_remainder=None, padding_value=None):
        return self.op("padded_batch", size=size,
                       **_given(drop_remainder=drop_remainder, padding_value=padding_value))

    def bucket_by_length(self, field, boundaries, batch_sizes, **params):
        return self.op("bucket_by_length", field=field, boundaries=boundaries,
                       batch_sizes=batch_sizes, **params)

    def repeat(self, count=-1):
        return self.op("repeat", count=count)

    def take(self, count):
        return self.op("take", count=count)

    def skip(self, count):
        return self.op("skip", count=count)

    def prefetch(self, buffer=0):
        return self.op("prefetch", buffer=buffer)

    def to_device(self, device=0, field=None, fields=None, dtype=None, layout=None, crop=None,
                  crop_position=None, flip_p=None, flip_direction=None, mean=None, std=None,
                  scale=None, stream=None, in_flight=None):
        """The last op: batches arrive in GPU memory as stoker.DeviceArray (torch.from_dlpack takes
        them without a copy). `field` names an image field to crop/flip/normalize/lay out on the
        device on the way (docs/gpu.md). Needs stoker built with CUDA and a GPU; through the
        service, the consumer (not the workers) runs it."""
        return self.op("to_device", device=device,
                       **_given(field=field, fields=fields, dtype=dtype, layout=layout, crop=crop,
                                crop_position=crop_position, flip_p=flip_p,
                                flip_direction=flip_direction, mean=mean, std=std, scale=scale,
                                stream=stream, in_flight=in_flight))

    def map(self, fn, buffer=None):
        """Runs fn(element) -> element in Python on every element: a dict of numpy arrays (plus
        "__keys__") in, a dict of arrays (numpy, or anything numpy.asarray takes: torch CPU
        tensors, lists) or bytes out, dtypes uint8/int32/int64/float32; an array returned
        unchanged is not copied. fn runs on a thread of its own that holds the GIL while it runs
        (one element at a time, `buffer` elements ahead, default 2); its CPU time is the stage
        "ops[i].python_map" of iterator.stats(). In-process only: the service and `stoker run`
        refuse it (write the step as a C++ plugin op for those, docs/pipeline.md)."""
        if not callable(fn):
            raise TypeError(f"map(fn): fn must be callable, got {type(fn).__name__}")
        return self.op("python_map", fn=_register_python_function(fn), **_given(buffer=buffer))

    def distribute(self, dispatcher, job_name=None, num_consumers=None, consumer_index=None,
                   deterministic=None, sharding="dynamic", compression="none",
                   partial_round="drop", num_epochs=None, no_worker_timeout=0, tls_ca=None,
                   token_file=None, tls_cert=None, tls_key=None,
                   cross_trainer_cache=False, trainer_id=None, on_fall_behind="recompute",
                   prefetch_mb=None, shared_memory=True):
        """The same pipeline, run by the stoker service's workers (dispatcher "host:port" or
        "grpc://host:port"). Only the workers open the data: this process needs no storage
        credentials.

        Each iteration of the result is the next epoch of one job (set_epoch(e) picks one): epoch e
        has the order and augmentation of the in-process epoch e.
        job_name: consumers that give the same name share one job; each element goes to one of
        them, first come first served (a job that finished, or that nobody consumed for the
        dispatcher's client timeout, is never joined: the name then starts a new job). Without a
        name the job is this consumer's own.
        num_consumers / consumer_index: coordinated reads for synchronous training (all ranks use
        one job_name): every consumer gets one batch per round and the same number of batches per
        epoch; partial_round "drop" (default) or "pad" says what happens to an incomplete round.
        The torch adapter fills them from torch.distributed's rank and world size.
        deterministic: deliver in the job's global order (the in-process order, whatever the
        number of workers); one consumer. Default: True, except for a job_name without
        num_consumers (a shared job, delivered first come first served); False: fastest first.
        compression ("none", "zstd" or "lz4") compresses elements on the wire (worth it when the
        network, not the workers' CPU, is the limit). num_epochs: epochs the job may run (default:
        as many as you iterate). no_worker_timeout: seconds without any worker before an error
        (default 0: wait, logging every 10 s).
        Security (docs/security.md): tls_ca, a PEM CA file, dials the dispatcher and workers with
        TLS, verifying their certificates (default: $STOKER_TLS_CA; none: plaintext); token_file
        names a file holding the token presented on every call (default: $STOKER_TOKEN_FILE);
        tls_cert / tls_key, PEM files, are the client certificate for servers that require one
        (mutual TLS).
        cross_trainer_cache (with job_name and a trainer_id per trainer): every trainer of the job
        reads all of it, produced once (hyper-parameter trials sharing preprocessing); a trainer
        behind the workers' window gets what it missed recomputed (on_fall_behind "recompute",
        the default) or skipped and counted ("skip"). In order by default.
        prefetch_mb: MiB of elements fetched ahead of the trainer (default 256).
        shared_memory: a worker on this host hands elements over through shared memory (read-only
        arrays straight from it, no socket copy); False: always through its reply (the TCP
        path). stats()["shm_elements"] counts what came through shared memory."""
        for i, op in enumerate(self._spec.get("ops", [])):
            if op.get("op") == "python_map":
                raise ValueError(
                    f"distribute: ops[{i}] is map(fn), a Python function, which the service's "
                    "workers (C++ processes) cannot run; write that step as a C++ plugin op "
                    "(docs/pipeline.md, \"plugins\"), or run this pipeline in-process")
        if not getattr(_stoker, "HAVE_SERVICE", False):
            raise NotImplementedError(
                "Pipeline.distribute: this build has no service client (src/stoker/service); "
                "run in-process by iterating the pipeline")
        compression = _service_mode("compression", compression)
        sharding = _service_mode("sharding", sharding)
        partial_round = _service_mode("partial_round", partial_round)
        if (num_consumers is None) != (consumer_index is None):
            raise ValueError("distribute: give num_consumers and consumer_index together")
        if num_consumers is not None and not 0 <= consumer_index < num_consumers:
            raise ValueError(f"distribute: consumer_index {consumer_index} is not 0 .. "
                             f"{num_consumers - 1}")
        if cross_trainer_cache and (not job_name or not trainer_id):
            raise ValueError("distribute: cross_trainer_cache needs a job_name (shared by the "
                             "trainers) and a trainer_id for each trainer")
        on_fall_behind = _service_mode("on_fall_behind", on_fall_behind)
        if deterministic is None:
            # In order, unless the job is named to be shared (first come first served).
            deterministic = (not job_name or num_consumers is not None or
                             bool(cross_trainer_cache))
        return DistributedPipeline(self, dispatcher, job_name or "", sharding, compression,
                                   num_consumers=num_consumers, consumer_index=consumer_index,
                                   partial_round=partial_round, deterministic=bool(deterministic),
                                   num_epochs=num_epochs, no_worker_timeout=no_worker_timeout,
                                   security={"tls_ca": tls_ca, "token_file": token_file,
                                             "tls_cert": tls_cert, "tls_key": tls_key},
                                   cross_trainer_cache=bool(cross_trainer_cache),
                                   trainer_id=trainer_id or "", on_fall_behind=on_fall_behind,
                                   prefetch_mb=prefetch_mb, shared_memory=bool(shared_memory))

    def _device_op(self):
        """The trailing to_device op of the spec, or None."""
        ops = self._spec.get("ops") or []
        return ops[-1] if ops and ops[-1].get("op") == "to_device" else None

    # --- running ------------------------------------------------------------------------------
    def _compile(self):
        if self._compiled is None:
            self._compiled = _stoker.Pipeline.from_json(json.dumps(self._spec))
        return self._compiled

    @property
    def fingerprint(self):
        """Stable digest of the spec (what a checkpoint is tied to)."""
        return self._compile().fingerprint

    @property
    def cardinality(self):
        """Elements per epoch when known without running, else None."""
        return self._compile().cardinality

    @property
    def source_size(self):
        """Samples per epoch of an indexed source; None for streams."""
        return self._compile().source_size

    def num_elements(self, rank=0, world_size=1):
        """Elements (batches, after batch) one epoch yields to rank `rank` of `world_size`;
        TypeError naming the op or source when that is not known without running."""
        return _length.elements_per_epoch(self._spec, self.source_size, rank, world_size)

    def __len__(self):
        """Elements (batches) per epoch, as iterating yields them; TypeError when unknown."""
        return self.num_elements()

    @property
    def classes(self):
        """Class names of a dataset converted from a folder tree (sorted class folders, empty
        ones included, as torchvision's ImageFolder): samples' "cls" field i means classes[i]."""
        source = self._spec.get("source", {})
        if "dataset" not in source:
            raise ValueError("classes: only a converted dataset (stoker.dataset(url)) records "
                             f"class names; this pipeline's source is {sorted(source)}")
        url = source["dataset"]
        names = _stoker.dataset_classes(url)
        if not names:
            raise ValueError(f"classes: the manifest of {url} lists no classes: it was not "
                             "converted from a folder tree root/<class>/<file> (or by a stoker "
                             "before class names were recorded: run `stoker convert` again)")
        return names

    @property
    def class_to_idx(self):
        """{class name: index}, as torchvision's ImageFolder.class_to_idx."""
        return {name: i for i, name in enumerate(self.classes)}

    def iterator(self, epoch=0, threads=0, rank=0, world_size=1):
        """An Iterator over epoch `epoch`. threads > 0 overrides the spec's CPU pool. With
        world_size > 1 (indexed sources only) this rank reads positions
        [rank*N/world_size, (rank+1)*N/world_size) of the epoch's sample order."""
        compiled = self._compile()
        return Iterator(compiled.make_iterator(epoch=epoch, threads=threads, rank=rank,
                                               world_size=world_size), self, epoch)

    def __iter__(self):
        return self.iterator()

    def __repr__(self):
        return f"stoker.Pipeline({self.to_json()})"


class Iterator:
    """Yields dicts {field: numpy array, "__keys__": [sample keys]}. Arrays are read-only views of
    stoker's buffers (arr.base is a stoker.Buffer); they stay valid after the iterator is gone.
    After a to_device op, fields are stoker.DeviceArray (GPU memory, exported through DLPack).
    The GIL is released while C++ produces the next element."""

    def __init__(self, native, pipeline, epoch):
        self._native = native
        self._pipeline = pipeline
        self._epoch = epoch

    def __iter__(self):
        return self

    def __next__(self):
        return self._native.__next__()

    def stats(self):
        """The stage report: per stage, its CPU seconds, elements, bytes and skipped elements."""
        return self._native.stats()

    @property
    def epoch(self):
        return self._epoch

    def state_dict(self):
        """The position after the last element returned (needs deterministic: true). Plain data:
        save it with torch.save / json / pickle."""
        return {"stoker_token": self._native.save(), "fingerprint": self._pipeline.fingerprint,
                "epoch": self._epoch}

    def load_state_dict(self, state):
        """Continues from `state` (from state_dict() of the same pipeline): the following elements
        are exactly those not yet returned when it was taken."""
        if state.get("fingerprint") not in (None, self._pipeline.fingerprint):
            raise ValueError("state_dict belongs to a different pipeline (fingerprint "
                             f"{state.get('fingerprint')}, this one {self._pipeline.fingerprint})")
        self._native.restore(state["stoker_token"])
        self._epoch = state.get("epoch", self._epoch)


# Epochs a job may run when the caller does not say: "as many as iterated". The job ends when its
# last consumer leaves.
_OPEN_ENDED_EPOCHS = 100000


class DistributedPipeline:
    """A Pipeline served by the stoker service. Each iteration is the next epoch of one job
    (set_epoch(e) or iterator(epoch=e) picks one); the job stays the same from epoch to epoch, so
    workers move on to the next epoch without a pause. close() (or the end of the process) leaves
    the job. state_dict() / load_state_dict() checkpoint and resume through the service
    (docs/protocol.md, "Checkpoint and resume")."""

    def __init__(self, pipeline, dispatcher, job_name, sharding, compression="none",
                 num_consumers=None, consumer_index=None, partial_round="drop",
                 deterministic=False, num_epochs=None, no_worker_timeout=0, security=None,
                 cross_trainer_cache=False, trainer_id="", on_fall_behind="recompute",
                 prefetch_mb=None, shared_memory=True):
        self.pipeline = pipeline
        self.prefetch_mb = prefetch_mb
        self.shared_memory = shared_memory
        self.cross_trainer_cache = cross_trainer_cache
        self.trainer_id = trainer_id
        self.on_fall_behind = on_fall_behind
        # TLS and token files (distribute's tls_ca, token_file, tls_cert, tls_key), the
        # environment's defaults filled in now.
        security = dict(security or {})
        if not security.get("tls_ca"):
            security["tls_ca"] = os.environ.get("STOKER_TLS_CA", "")
        if not security.get("token_file"):
            security["token_file"] = os.environ.get("STOKER_TOKEN_FILE", "")
        self.security = {k: os.fspath(v) if v else "" for k, v in security.items()}
        self.dispatcher = dispatcher
        self.job_name = job_name
        self.sharding = sharding
        self.compression = compression
        self.num_consumers = num_consumers
        self.consumer_index = consumer_index
        self.partial_round = partial_round
        self.deterministic = deterministic
        self.num_epochs = num_epochs
        self.no_worker_timeout = no_worker_timeout
        self._consumer = None
        self._consumer_key = None
        self._open_iterator = None  # the last iterator handed out, while unfinished
        self._exhausted_epoch = None  # the consumer's epoch, once an iterator delivered all of it
        self._next_epoch = 0
        self._resume = None  # a state from load_state_dict, for the next consumer
        # Without a job_name: the run's name (drawn here, or for coordinated reads agreed once by
        # every rank: rank 0 draws it) and how many jobs this object has made under it; job k is
        # named "<run name>-<k>" (on every rank alike) (docs/python.md).
        self._run_name = None
        self._generation = 0

    @property
    def spec(self):
        return self.pipeline.spec

    def _device_op(self):
        return self.pipeline._device_op()

    def op(self, name, **params):
        """The same service job settings with one more op (e.g. to_device, run by this consumer)."""
        return DistributedPipeline(self.pipeline.op(name, **params), self.dispatcher,
                                   self.job_name, self.sharding, self.compression,
                                   num_consumers=self.num_consumers,
                                   consumer_index=self.consumer_index,
                                   partial_round=self.partial_round,
                                   deterministic=self.deterministic, num_epochs=self.num_epochs,
                                   no_worker_timeout=self.no_worker_timeout,
                                   security=self.security,
                                   cross_trainer_cache=self.cross_trainer_cache,
                                   trainer_id=self.trainer_id,
                                   on_fall_behind=self.on_fall_behind,
                                   prefetch_mb=self.prefetch_mb,
                                   shared_memory=self.shared_memory)

    def set_epoch(self, epoch):
        """The epoch the next plain iteration delivers."""
        self._next_epoch = int(epoch)

    def state_dict(self):
        """Where this consumer stands in its job: every sample of the current epoch it delivered,
        whatever split or worker it came from (the same shape as Iterator.state_dict()). Plain
        data: save it with torch.save / json / pickle. Needs dynamic sharding and no
        num_consumers."""
        if self._consumer is None:
            if self._resume is not None:
                return dict(self._resume)
            raise RuntimeError("state_dict: this distributed pipeline has not been iterated yet")
        return {"stoker_token": self._consumer.checkpoint(),
                "fingerprint": self._consumer.fingerprint, "epoch": self._consumer.epoch,
                "job_id": self._consumer.job_id}

    def load_state_dict(self, state):
        """The next iteration continues from `state` (from state_dict() of the same pipeline,
        perhaps in another process and with another number of workers): it delivers exactly the
        samples of that epoch not yet delivered (deterministic: in the same order), then the
        following epochs."""
        if not isinstance(state, dict) or "stoker_token" not in state:
            raise ValueError("load_state_dict: not a state from DistributedPipeline.state_dict()")
        self.close()
        self._resume = dict(state)
        self._next_epoch = int(state["epoch"])

    def _consumer_for(self, epoch, num_consumers, consumer_index, job_name):
        key = (num_consumers, consumer_index, job_name)
        c = self._consumer
        # The consumer only moves forward: an epoch it is in the middle of, or has delivered,
        # starts a new job.
        reusable = (c is not None and self._consumer_key == key and c.epoch <= epoch and
                    not (c.epoch == epoch and (self._open_iterator is not None or
                                               self._exhausted_epoch == epoch)))
        if reusable:
            while c.epoch < epoch:
                if not c.advance_epoch():
                    reusable = False
                    break
        if not reusable:
            resume = self._resume
            self.close()
            epochs = self.num_epochs if self.num_epochs is not None else _OPEN_ENDED_EPOCHS
            if self.sharding == "off":
                # Each worker's stream runs through every epoch of its job without a mark between
                # them, so an iteration (one epoch) is a job of one epoch: without this, the first
                # iteration of an open-ended job went on through all its epochs.
                epochs = 1
            first = int(epoch)
            if resume is not None and int(resume["epoch"]) == first - 1:
                # A state taken at (or near) the end of its epoch, then the next epoch: resume (so
                # that the state's job is replaced, not left running), then move on.
                first = int(resume["epoch"])
            elif resume is not None and int(resume["epoch"]) != first:
                resume = None  # set_epoch moved elsewhere: start that epoch afresh
            name = job_name
            if not name:
                # This object's jobs get names of its own: "<run name>-<k>" for its k-th job. A
                # name makes a GetOrCreateJob that is retried (its reply late under load) find
                # its job instead of creating a second one. Coordinated ranks agree on the run
                # name once (torch.distributed); as every rank makes the same sequence of jobs
                # (same epochs, same resumes), numbering them needs no further collective call.
                if self._run_name is None:
                    self._run_name = (_shared_job_name(self.pipeline) if num_consumers > 0
                                      else _own_job_name(self.pipeline))
                name = f"{self._run_name}-{self._generation}"
                self._generation += 1
            c = _stoker.ServiceConsumer({
                "resume": resume["stoker_token"] if resume is not None else None,
                # The job the state was taken from: the dispatcher ends it if it still runs (a
                # process killed with kill -9 could not leave it).
                "replaces_job": int(resume.get("job_id") or 0) if resume is not None else 0,
                "dispatcher": self.dispatcher, "job_name": name,
                "spec_json": self.pipeline.to_json(), "sharding": self.sharding,
                "compression": self.compression, "num_epochs": int(epochs),
                "first_epoch": first, "num_consumers": int(num_consumers),
                "consumer_index": int(consumer_index), "partial_round": self.partial_round,
                "deterministic": bool(self.deterministic),
                "no_worker_timeout": float(self.no_worker_timeout), **self.security,
                "cross_trainer_cache": bool(self.cross_trainer_cache),
                "trainer_id": self.trainer_id, "on_fall_behind": self.on_fall_behind,
                "prefetch_mb": self.prefetch_mb, "shared_memory": bool(self.shared_memory),
                # The job's name on the status page and /metrics (issue 24); a binding without
                # the key ignores it.
                "display_name": _display_name(),
                # No num_epochs given: the status page shows the epochs read, not a bound.
                "open_ended": self.num_epochs is None and self.sharding != "off"})
            self._consumer, self._consumer_key = c, key
            if first < epoch and not c.advance_epoch():
                raise ValueError(f"epoch {epoch}: the job has no epoch after {first}")
        self._exhausted_epoch = None
        return c

    def num_elements(self, rank=0, world_size=1):
        """Elements (batches) one epoch delivers to consumer `rank` of `world_size`, as iterator()
        with the same arguments reads the job; TypeError naming the mode or op where the service
        does not fix that count in advance (docs/python.md, "len() on the service")."""
        n, _ = self._mode(rank, world_size)
        if self.sharding == "off":
            mode = "sharding 'off' (every worker runs the whole pipeline)"
        elif self.cross_trainer_cache or n > 0 or self.deterministic:
            mode = None  # every trainer, every round, or the one consumer: a fixed count
        else:
            mode = ("a shared job (job_name without num_consumers, deterministic=False), whose "
                    "consumers take splits first come first served")
        if mode is not None:
            raise TypeError(f"len() is unknown on the service for {mode}: how many elements "
                            "this consumer gets depends on timing; use coordinated reads "
                            "(num_consumers, or the torch adapter under torch.distributed) or a "
                            "deterministic job for a fixed count, or count the batches of an "
                            "epoch")
        # The ops first (from the spec alone), then the sample count (may read the manifest).
        return _length.service_elements_per_epoch(self.pipeline.spec, self._num_samples, n,
                                                  self.partial_round)

    def _num_samples(self):
        """Samples per epoch: as the job's workers counted them once a consumer exists, else from
        the source here (a dataset's manifest; the trainer needs no other data access)."""
        if self._consumer is not None:
            return self._consumer.num_samples(60.0)
        try:
            size = self.pipeline.source_size
        except (OSError, _stoker.StokerError) as e:  # the trainer may not reach the data
            raise TypeError("len() is unknown yet: the dataset's sample count comes from its "
                            f"manifest, which this process cannot read ({e}); it is known once "
                            "the first epoch has started (iterate first)") from e
        if size is None:
            _length.elements_per_epoch(self.pipeline.spec, None)  # raises, saying why
        return size

    def __len__(self):
        """Elements (batches) per epoch this consumer receives (num_elements())."""
        return self.num_elements()

    def _mode(self, rank=0, world_size=1):
        """(num_consumers, consumer_index) this object reads with: its own, or with world_size > 1
        and none of its own, coordinated reads by world_size ranks (0, 0: one consumer)."""
        n, i = self.num_consumers, self.consumer_index
        if n is None and world_size > 1:
            n, i = world_size, rank
        if n is None:
            n, i = 0, 0
        return n, i

    def iterator(self, epoch=0, threads=0, rank=0, world_size=1):
        """An iterator over epoch `epoch` of the job. With world_size > 1 and no num_consumers of
        its own, the job is read with coordinated reads by world_size ranks (this one is `rank`);
        threads is ignored (the workers run the pipeline)."""
        n, i = self._mode(rank, world_size)
        consumer = self._consumer_for(epoch, n, i, self.job_name)
        it = ServiceIterator(consumer, self, epoch)
        self._open_iterator = it
        self._next_epoch = epoch + 1
        return it

    def __iter__(self):
        return self.iterator(epoch=self._next_epoch)

    def close(self):
        """Leaves the job now (the dispatcher hands what this consumer did not finish to the
        others, or ends the job if it was the last consumer)."""
        self._resume = None
        if self._consumer is not None:
            self._consumer.close()
        self._consumer = None
        self._open_iterator = None
        self._exhausted_epoch = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _service_mode(field, value):
    """distribute's `field` (sharding, partial_round, on_fall_behind, compression) as the service
    spells it; ValueError naming the argument, the value and the allowed values. The spellings
    live in the C++ service (service/common/modes.cc), which the CLI reads them with too."""
    try:
        return _stoker.service_mode(field, value)
    except ValueError as e:
        raise ValueError(f"distribute: {e}") from None


def _display_name():
    """<user>@<host>:<program>: who runs this consumer, for operators (the dispatcher's status
    page and /metrics name a job by it)."""
    import getpass
    import socket
    import sys
    try:
        user = getpass.getuser()
    except Exception:  # no user name for this uid (a container)
        user = str(os.getuid())
    program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else "python"
    return f"{user}@{socket.gethostname()}:{program or 'python'}"


def _own_job_name(pipeline):
    """A job name for one consumer's own jobs: nobody else gives it."""
    import hashlib
    import uuid
    digest = hashlib.sha256(pipeline.to_json().encode()).hexdigest()[:12]
    return f"py-{digest}-{uuid.uuid4().hex[:12]}"


def _shared_job_name(pipeline):
    """One job name for every rank of a torch.distributed run: rank 0 draws it and broadcasts it."""
    import hashlib
    import uuid
    try:
        import torch.distributed as dist
    except ImportError:
        dist = None
    if dist is None or not (dist.is_available() and dist.is_initialized()):
        raise ValueError("coordinated reads need a job_name that every rank gives "
                         "(distribute(job_name=...)) when torch.distributed is not initialised")
    # Hashed from the spec's text, not pipeline.fingerprint: that would open the data here.
    digest = hashlib.sha256(pipeline.to_json().encode()).hexdigest()[:12]
    name = [f"ddp-{digest}-{uuid.uuid4().hex[:12]}"]
    dist.broadcast_object_list(name, src=0)
    return name[0]


class ServiceIterator:
    """One epoch of a distributed pipeline."""

    def __init__(self, consumer, owner, epoch):
        self._consumer = consumer
        self._owner = owner
        self._epoch = epoch
        self._done = False

    @property
    def epoch(self):
        return self._epoch

    @property
    def job_id(self):
        return self._consumer.job_id

    def num_samples(self, timeout=60.0):
        """Samples per epoch, as the job's workers counted them."""
        return self._consumer.num_samples(timeout)

    def stats(self):
        """This consumer's counters: elements, bytes, duplicates, splits, shm_elements and
        shm_bytes (received through a worker's shared memory), and with a
        cross-trainer cache cache_hits, cache_recomputed, cache_skipped (elements received from
        the workers' windows, computed again for it, skipped)."""
        return self._consumer.stats()

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        element = self._consumer.next()
        if element is None:
            self._done = True
            if self._owner._open_iterator is self:
                self._owner._open_iterator = None
                self._owner._exhausted_epoch = self._epoch
            raise StopIteration
        return element

    def close(self):
        self._owner.close()

    def state_dict(self):
        """The position after the last element returned (DistributedPipeline.state_dict())."""
        return self._owner.state_dict()

    def load_state_dict(self, state):
        """Continues from `state`: the following elements are exactly those not yet delivered
        when it was taken."""
        self._owner.load_state_dict(state)
        fresh = self._owner.iterator(epoch=int(state["epoch"]))
        self._consumer, self._epoch, self._done = fresh._consumer, fresh._epoch, False
        self._owner._open_iterator = self


def _register_python_function(fn):
    """A name for fn in _python_functions, stable across runs of the same program (module and
    qualified name, numbered when several functions share one), so checkpoints still match."""
    base = f"{getattr(fn, '__module__', None) or '?'}.{getattr(fn, '__qualname__', type(fn).__name__)}"
    name, n = base, 1
    while name in _python_functions and _python_functions[name] is not fn:
        n += 1
        name = f"{base}#{n}"
    _python_functions[name] = fn
    return name


def _given(**params):
    return {k: v for k, v in params.items() if v is not None}


def from_spec(spec):
    """Same as Pipeline.from_spec."""
    return Pipeline.from_spec(spec)


def dataset(url, wait=False, wait_timeout_s=None, **options):
    """A pipeline reading a converted stoker dataset (prefix, manifest.json or one .stk shard),
    or a snapshot (`stoker snapshot`: its elements come back as they were stored). wait=True
    reads a snapshot still being written, waiting for its parts (up to wait_timeout_s, default
    600, for each). options: top-level spec keys (seed, deterministic, threads, ...)."""
    source = {"dataset": str(url)}
    if wait:
        source["wait"] = True
    if wait_timeout_s is not None:
        source["wait_timeout_s"] = wait_timeout_s
    return Pipeline({"source": source, "ops": [], **options})


def tar(urls, **options):
    """A pipeline streaming WebDataset .tar files (each file is a shard)."""
    return Pipeline({"source": {"tar": [str(u) for u in _as_list(urls)]}, "ops": [], **options})


def tfrecord(urls, **options):
    """A pipeline streaming TFRecord files (each file is a shard)."""
    return Pipeline({"source": {"tfrecord": [str(u) for u in _as_list(urls)]}, "ops": [],
                     **options})


def memory_range(n, **options):
    """Samples 0..n-1 (key "<i>", field "value" = int64 i): for tests and examples."""
    return Pipeline({"source": {"range": int(n)}, "ops": [], **options})


def _as_list(x):
    return [x] if isinstance(x, (str, os.PathLike)) else list(x)
