"""What every system under test and every shell share: effects (kernel.effects). It imports no system and no
shell."""
