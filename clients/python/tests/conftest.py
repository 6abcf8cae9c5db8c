import sys
from pathlib import Path

# The package of this tree, installed or not.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
