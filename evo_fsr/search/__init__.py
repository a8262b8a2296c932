"""The evolutionary search: one ask/tell loop (loop.py) whose behaviour per mode is a policy
(policies.py), breeding (breeder.py, explore.py), the population (population.py, selection.py)
and the run directory (store.py)."""
