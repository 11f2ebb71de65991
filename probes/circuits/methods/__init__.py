"""Ways to find a circuit other than the exact oracle itself, scored against it: attribution
(EAP, EAP-IG) and ACDC, the joint-effect search, learned masks, and how rankings are judged."""
