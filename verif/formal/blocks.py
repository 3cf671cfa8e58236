"""The formal harnesses ``dysharp formal`` knows: name -> (what, harness factory, prove depth, cover depth).

Depths: ``depth`` is the k of k-induction and the bound of the base case (a bounded proof of that many
cycles from reset when induction does not close); ``cover`` bounds the search for each ``Cover``."""

from .credit_link import CreditLinkHarness
from .receive_path import ReceivePathHarness
from .switch import SwitchHarness

BLOCKS = {
    "credit_link": ("credit link: CreditSender -> CreditReceiver (4 credits), any traffic and stalls",
                    lambda: CreditLinkHarness(4), 8, 12),
    "receive_path": ("GPU receive path (3 credits, max_payload 2): a poisoned or misframed packet commits nothing",
                     lambda: ReceivePathHarness(), 10, 8),
    "switch": ("NVSwitch datapath (4 ports, 2 active; 4 credits, max_payload 1, speedup 1): atomic, lossless",
               lambda: SwitchHarness(), 9, 10),
}
