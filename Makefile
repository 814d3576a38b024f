# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | sha1sum | cut -c1-12)

.PHONY: run test docs chaos lint format bench bench-full migrate clean

# pyproject.toml: the project itself is installed too (editable, its dependencies pinned in
# requirements.txt), which puts the `schedctl` console script in $(VENV)/bin.
$(STAMP): requirements.txt pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

$(VENV): $(STAMP)

# RUN_ARGS: e.g. `make run RUN_ARGS="--port 8001"`.
RUN_ARGS ?=
run: $(STAMP)
	$(PY) manage.py runstack $(RUN_ARGS)

# First the operating-system tools the suites drive (bubblewrap, slirp4netns, pgbouncer,
# chromium, promtool, alertmanager), with the machine's own Python and before the virtualenv
# is built, so a missing one is told within seconds: installed when this user may (root, or
# passwordless sudo, with apt-get), else one message naming them, or with
# `make test SKIP_OS_SUITES=1` the suites that need them skip (scripts/os_tools.py).
test:
	@$(PYTHON) -m scripts.os_tools ensure
	@$(MAKE) --no-print-directory $(STAMP)
	$(PY) -m tests.run

# The manual (docs/, mkdocs.yml) into build/manual; --strict: a broken link, a page left out
# of the navigation or a warning of the API reference's generation fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir build/manual

# The chaos suite's long versions (each fault longer, more load); writes the table to
# bench/results/chaos.md, and the nemesis' (10 minutes of seeded random faults) to
# bench/results/nemesis.md: `make chaos SEED=7` replays seed 7 (default: a new seed each run,
# printed in the table). `make test` runs the short versions of the same cases.
# The nemesis runs on a PostgreSQL primary and standby (tests/pg_cluster.py), which adds the
# PostgreSQL faults; NEMESIS_POSTGRES=single keeps it on one; NEMESIS_SECONDS its span.
SEED ?= $(shell date +%s)
NEMESIS_POSTGRES ?= cluster
NEMESIS_SECONDS ?= 600
chaos: $(STAMP)
	CHAOS_LONG=1 CHAOS_REPORT=bench/results/chaos.md NEMESIS_SEED=$(SEED) \
		NEMESIS_POSTGRES=$(NEMESIS_POSTGRES) NEMESIS_SECONDS=$(NEMESIS_SECONDS) \
		NEMESIS_REPORT=bench/results/nemesis.md DJANGO_SETTINGS_MODULE=project.settings.test \
		$(PY) -m pytest -p no:xdist -q tests/chaos

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(VENV)/bin/lint-imports --no-logo

format: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

migrate: $(STAMP)
	$(PY) manage.py migrate

bench: $(STAMP)
	$(PY) -m bench quick

bench-full: $(STAMP)
	$(PY) -m bench full

clean:
	rm -rf $(VENV) var build
