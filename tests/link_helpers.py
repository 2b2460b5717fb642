"""What the tests of the simulated links' CRC and fault injector share: random packets."""

from nicoll.hw.net.packet import DEST_WIDTH

__all__ = ["random_packets"]


def random_packets(rng, count, width, *, longest, shortest=1, keep="tail"):
    """``count`` packets of ``shortest``..``longest`` beats, as lists of beat dicts.  With
    ``keep="tail"`` every beat but the last is full and the last keeps 1..all of its low
    bytes (as the cores send); with ``"random"`` every beat's keep is random, but for byte 0
    of the first beat, always kept."""
    nbytes = width // 8
    packets = []
    for _ in range(count):
        beats = rng.randint(shortest, longest)
        dest, control = rng.getrandbits(DEST_WIDTH), rng.getrandbits(1)
        packet = []
        for k in range(beats):
            last = k == beats - 1
            if keep == "random":
                kept = rng.getrandbits(nbytes) | int(k == 0)
            else:
                kept = (1 << (rng.randint(1, nbytes) if last else nbytes)) - 1
            packet.append({"data": rng.getrandbits(width), "keep": kept, "last": int(last),
                           "dest": dest, "control": control})
        packets.append(packet)
    return packets
