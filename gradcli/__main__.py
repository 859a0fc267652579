"""`python -m gradcli`."""

from .cli import main

# The guard matters: --ddp/--fsdp start ranks with multiprocessing's spawn, which imports the
# main module again in each rank (as __mp_main__), and an unguarded main() ran gradcli there.
if __name__ == "__main__":
    main()
