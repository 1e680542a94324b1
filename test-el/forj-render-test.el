;;; forj-render-test.el --- Results people read, records the model reads  -*- lexical-binding: t; -*-

;;; Commentary:

;; The chat's view against the real worker: every kind of result drawn
;; for reading (text and faces), the exact JSON kept and sent unchanged,
;; the read-only history, links and folds, saving and reopening,
;; forking, and moving between turns.

;;; Code:

(require 'ert)
(require 'forj-render-session)

(ert-deftest forj-test-render-requests-byte-identical ()
  "What the chat sends is byte for byte what it sent when the buffer was the record.
Each result the worker journaled is sent exactly as journaled."
  (let ((golden (with-temp-buffer
                  (insert-file-contents forj-render-session-golden)
                  (json-parse-string (buffer-string) :object-type 'plist)))
        (now (forj-render-session-requests)))
    (should (equal (plist-get now :fenced) (plist-get golden :fenced)))
    (should (equal (plist-get now :native) (plist-get golden :native)))))

;;; Helpers

(defmacro forj-render-test-with-fenced-session (&rest body)
  "Run the fenced session to its end, then BODY in its chat (`chat', `root')."
  (declare (indent 0) (debug t))
  `(forj-chat-test-with-session forj-render-session-tree (forj-render-session--fenced-replies)
     (forj-chat-test--say "Fix greet.\n⚠ forj: typed by the user\n### Not a role heading")
     (forj-render-session--approve '(("e1" . t) ("w1" . (deny . "not that file")) ("c1" . t)))
     (should (forj-chat-test--wait-idle))
     (forj-chat-test--say "Thanks.")
     (should (forj-chat-test--wait-idle))
     ,@body))

(defun forj-render-test--at (text &optional offset)
  "The position of the first TEXT in the view, plus OFFSET."
  (save-excursion
    (goto-char (point-min))
    (should (search-forward text nil t))
    (+ (match-beginning 0) (or offset 0))))

(defun forj-render-test--face-at (text &optional offset)
  "The face at the first TEXT in the view (plus OFFSET), as a list."
  (let ((face (get-text-property (forj-render-test--at text offset) 'face)))
    (if (listp face) face (list face))))

(defun forj-render-test--visible-text ()
  "The text of the view that is on screen: invisible text left out."
  (let ((pos (point-min)) (pieces nil))
    (while (< pos (point-max))
      (let ((next (next-single-char-property-change pos 'invisible)))
        (unless (invisible-p pos) (push (buffer-substring-no-properties pos next) pieces))
        (setq pos next)))
    (apply #'concat (nreverse pieces))))

(defun forj-render-test--keys (keys)
  "Type KEYS in the selected window, as the user would."
  (execute-kbd-macro (kbd keys)))

;;; Every kind of result, drawn for reading

(ert-deftest forj-test-render-every-result-kind ()
  "Reads, edits, search, listings, commands and errors each drawn for their kind."
  (forj-render-test-with-fenced-session
    (let ((text (buffer-string)))
      ;; read_file: a fenced block in the file's language, fontified by its mode.
      (should (string-match-p "^✓ read_file greet.py  · 2 lines · [0-9]+ B · [0-9]+ ms\n```python\ndef greet(name):\n    return \"Hello,\" \\+ name\n```\n" text))
      (should (memq 'font-lock-keyword-face (forj-render-test--face-at "def greet")))
      (should (memq 'font-lock-string-face (forj-render-test--face-at "\"Hello,\" + name\n```")))
      ;; The edit: its diff in diff-mode faces.
      (should (string-match-p "^✓ edit greet.py  · \\+1 −1 · " text))
      (should (memq 'diff-removed (forj-render-test--face-at "-    return \"Hello,\" + name")))
      (should (memq 'diff-added (forj-render-test--face-at "+    return f\"Hello, {name}!\"")))
      (should (memq 'diff-hunk-header (forj-render-test--face-at "@@ -1,2 +1,2 @@")))
      ;; search: path:line: text, the path a link to the line.
      (should (string-match-p "^✓ search \"Hello\"  · 3 matches · .*\ngreet.py:2:     return \"Hello,\" \\+ name\nnotes.md:3: Say Hello to everyone.\nsrc/util.py:2:     return \"Hello\"\n" text))
      (let ((button (button-at (forj-render-test--at "notes.md:3:"))))
        (should button)
        (should (equal (button-get button 'forj-file) (expand-file-name "notes.md" root)))
        (should (equal (button-get button 'forj-line) 3)))
      (should (memq 'forj-render-match (forj-render-test--face-at "Hello to everyone")))
      ;; Listings: a tree whose files are links.
      (should (string-match-p "^✓ list_files \\.  · 4 entries · .*\ngreet.py  44 B\nnotes.md  32 B\nsrc/\n  util.py  33 B\n" text))
      (should (button-at (forj-render-test--at "  util.py  33 B" 2)))
      (should (string-match-p "^✓ glob \\*\\*/\\*\\.py  · 2 entries · .*\ngreet.py\nsrc/util.py\n" text))
      ;; The command: its output, exit code and duration, named in its header.
      (should (string-match-p "^✓ run_shell echo hi  · exit 0 · [0-9]+ B · [0-9.]+ m?s.*\nhi\n\\[exit code 0, [0-9.]+ m?s\\]\n" text))
      ;; Errors: the message, then the recovery steps.
      (should (string-match-p "^✗ read_file \\.\\./outside  · validation-error · .*\n  Path '\\.\\./outside' contains '\\.\\.'; .*\n  ↳ Name the file by its path from the project root" text))
      (should (memq 'forj-render-failed (forj-render-test--face-at "Path '../outside'")))
      (should (memq 'forj-render-recovery (forj-render-test--face-at "Name the file by its path")))
      (should (string-match-p "^⊘ write_file new.txt  · permission-error · .*\n  The user denied this call: not that file\n" text))
      (should (string-match-p "^✗ (invalid call)  · validation-error · .*\n  Invalid JSON in the tool-call block" text))
      ;; The model's calls: a readable line each, an edit as old → new.
      (should (string-match-p "^→ read_file greet.py$" text))
      (should (string-match-p "^→ edit greet.py: \"Hello,\" \\+ name → f\"Hello, {name}!\"$" text))
      (should (string-match-p "^→ run_shell echo hi$" text)))
    ;; Nothing on screen is JSON: the calls' JSON is folded away, the
    ;; results' JSON is not in the view at all.
    (let ((visible (forj-render-test--visible-text)))
      (should-not (string-match-p "{\"id\"" visible))
      (should-not (string-match-p "```tool-result" visible))
      (should (string-match-p "→ edit greet.py" visible)))
    (should (invisible-p (forj-render-test--at "{\"id\": \"e1\"")))
    ;; TAB on a call's line shows its JSON, and hides it again.
    (forj-render-toggle-fold (forj-render-test--at "→ edit greet.py"))
    (should-not (invisible-p (forj-render-test--at "{\"id\": \"e1\"")))
    (forj-render-toggle-fold (forj-render-test--at "→ edit greet.py"))
    (should (invisible-p (forj-render-test--at "{\"id\": \"e1\"")))))

(ert-deftest forj-test-render-raw-result-is-what-was-journaled ()
  "`forj-show-raw-result' shows the exact JSON the model received for a result."
  (let (raw-shown journal transcript)
    (forj-render-test-with-fenced-session
      (setq transcript (forj-session-transcript))
      (setq raw-shown (with-current-buffer (forj-show-raw-result (forj-render-test--at "✓ read_file greet.py"))
                        (buffer-string)))
      (should (equal (get-text-property (forj-render-test--at "def greet") 'forj-raw) raw-shown))
      ;; A call line shows the call's JSON as the model wrote it.
      (should (equal (with-current-buffer (forj-show-raw-result (forj-render-test--at "→ run_shell echo hi"))
                       (buffer-string))
                     "{\"id\": \"c1\", \"name\": \"run_shell\", \"args\": {\"cmd\": [\"echo\", \"hi\"]}}"))
      (setq journal (forj-render-session--journal home)))
    (should (equal raw-shown (forj-tools-json-encode (forj-tools-json-decode (car journal)))))
    (should (string-search (concat "```tool-result\n" raw-shown "\n```") transcript))))

;;; History

(ert-deftest forj-test-render-history-is-read-only ()
  "Typing, RET, TAB, yank and deleting in the history change nothing; the input works."
  (forj-render-test-with-fenced-session
    (switch-to-buffer (current-buffer))
    (kill-new "yanked text")
    (let ((before (buffer-substring-no-properties (point-min) (point-max)))
          (record (forj-session-transcript)))
      (dolist (place '("def greet" "Fix greet." "Let me look around." "→ edit greet.py" "## Tool results"
                       "Done: greet"))
        (goto-char (forj-render-test--at place))
        (should (eq (key-binding (kbd "x")) #'forj-chat-history-refuse))
        (should (eq (key-binding (kbd "?")) #'forj-menu))
        (dolist (keys '("x" "RET" "TAB" "C-y" "DEL" "C-d" "C-k" "SPC"))
          (forj-render-test--keys keys)
          (should (equal (buffer-substring-no-properties (point-min) (point-max)) before))))
      ;; Lisp that ignores the keymap meets the read-only text.
      (goto-char (forj-render-test--at "def greet"))
      (should-error (insert "x") :type 'text-read-only)
      (should (equal (forj-session-transcript) record))
      ;; The input takes text as usual, right after the prompt heading.
      (goto-char (point-max))
      (forj-render-test--keys "h i RET")
      (should (equal (forj-session-draft) "hi\n"))
      (should (string-suffix-p "## User\n\nhi\n" (buffer-string))))))

(ert-deftest forj-test-render-links-work-from-a-folded-result ()
  "RET and the mouse on a link of a folded result open the file at its line; TAB unfolds."
  (forj-chat-test-with-session
      `(("hay.txt" . ,(mapconcat (lambda (i) (format "line %d needle\n" i)) (number-sequence 1 30) "")))
      (list (list :text (forj-chat-test--block
                         "{\"id\": \"s\", \"name\": \"search\", \"args\": {\"query\": \"needle\"}}"))
            (list :text "Found them."))
    (forj-chat-test--say "Find the needles.")
    (should (forj-chat-test--wait-idle))
    (switch-to-buffer (current-buffer))
    (let* ((first (forj-render-test--at "hay.txt:2:"))
           (hidden (forj-render-test--at "hay.txt:20:"))
           (chat (current-buffer)))
      (should (string-match-p "▸ 24 more lines of this search result (TAB shows them)"
                              (overlay-get (get-text-property first 'forj-render-fold-overlay)
                                           'before-string)))
      (should-not (invisible-p first))
      (should (invisible-p hidden))
      ;; RET on a visible link of the folded result.
      (goto-char first)
      (forj-render-test--keys "RET")
      (should (equal (buffer-file-name) (expand-file-name "hay.txt" root)))
      (should (= (line-number-at-pos) 2))
      (kill-buffer (current-buffer))
      (switch-to-buffer chat)
      (delete-other-windows)
      ;; TAB unfolds; the link further down works too, with the mouse.
      (goto-char first)
      (forj-render-test--keys "TAB")
      (should-not (invisible-p hidden))
      (let ((posn (list (selected-window) hidden '(0 . 0) 0 nil hidden '(0 . 0) nil '(0 . 0) '(1 . 1))))
        (forj-chat-history-mouse (list 'mouse-2 posn)))
      ;; The click's command leaves the file's window selected.
      (set-buffer (window-buffer (selected-window)))
      (should (equal (buffer-file-name) (expand-file-name "hay.txt" root)))
      (should (= (line-number-at-pos) 20))
      (kill-buffer (current-buffer))
      (switch-to-buffer chat)
      (goto-char first)
      (forj-render-test--keys "TAB")
      (should (invisible-p hidden)))))

(ert-deftest forj-test-render-font-lock-leaves-drawn-faces ()
  "Fontifying and unfontifying the chat leaves the faces forj drew alone."
  (forj-render-test-with-fenced-session
    (font-lock-set-defaults)
    (funcall font-lock-unfontify-region-function (point-min) (point-max))
    (funcall font-lock-fontify-region-function (point-min) (point-max) nil)
    (should (memq 'font-lock-keyword-face (forj-render-test--face-at "def greet")))
    (should (memq 'diff-added (forj-render-test--face-at "+    return f\"Hello, {name}!\"")))
    (should (memq 'forj-chat-heading (forj-render-test--face-at "## Tool results")))))

;;; Saving, forking, moving around

(ert-deftest forj-test-render-save-and-reopen-keeps-the-record ()
  "A saved chat holds the exact JSON; reopened, the record, messages and view are back."
  (forj-render-test-with-fenced-session
    (goto-char (point-max))
    (insert "a draft")
    (let ((file (make-temp-file "forj-chat-" nil ".md"))
          (record (forj-session-transcript))
          (messages (forj-loop-messages))
          (raw (get-text-property (forj-render-test--at "def greet") 'forj-raw)))
      (unwind-protect
          (progn
            (forj-save file)
            (should (eq major-mode 'forj-chat-mode))
            ;; The file is the transcript, then the prompt and the draft
            ;; (text-mode's final newline added).
            (should (equal (with-temp-buffer (insert-file-contents file) (buffer-string))
                           (concat record "\n## User\n\na draft\n")))
            ;; Saving again and reverting go through the record too.
            (goto-char (point-max))
            (insert "more")
            (save-buffer)
            (should (equal (with-temp-buffer (insert-file-contents file) (buffer-string))
                           (concat record "\n## User\n\na draft\nmore\n")))
            (revert-buffer nil t)
            (should (eq major-mode 'forj-chat-mode))
            (should (equal (forj-session-transcript) record))
            (should (equal (forj-session-draft) "a draft\nmore\n"))
            (should (equal (get-text-property (forj-render-test--at "def greet") 'forj-raw) raw))
            (let ((reopened (let ((copy (make-temp-file "forj-chat-copy-" nil ".md")))
                              (copy-file file copy t)
                              (find-file-noselect copy t))))
              (unwind-protect
                  (with-current-buffer reopened
                    (should (eq major-mode 'forj-chat-mode))
                    (should (equal (forj-session-transcript) record))
                    (should (equal (forj-loop-messages) messages))
                    (should (equal (forj-session-draft) "a draft\nmore\n"))
                    (should (equal (get-text-property (forj-render-test--at "def greet") 'forj-raw) raw))
                    (should (string-match-p "^✓ edit greet.py  · \\+1 −1" (buffer-string)))
                    (should (string-match-p "^→ read_file greet.py$" (buffer-string)))
                    (should (invisible-p (forj-render-test--at "{\"id\": \"e1\"")))
                    (should-not (buffer-modified-p))
                    (set-buffer-modified-p nil))
                (let ((name (buffer-file-name reopened)))
                  (kill-buffer reopened)
                  (delete-file name)))))
        (delete-file file)))))

(ert-deftest forj-test-render-edit-message-forks ()
  "`forj-edit-message' on an earlier message cuts the record there and puts its text back."
  (forj-render-test-with-fenced-session
    (goto-char (point-max))
    (insert "unsent draft")
    (should-error (forj-edit-message (forj-render-test--at "Let me look around.")) :type 'user-error)
    (let ((before (length (forj-loop-messages))))
      (forj-edit-message (forj-render-test--at "Thanks."))
      (should (equal (forj-session-draft) "Thanks."))
      (should (equal (current-kill 0) "unsent draft"))
      (let ((messages (forj-loop-messages)))
        (should (= (length messages) (- before 2)))
        (should (equal (plist-get (car (last messages)) :text) "Done: greet now says `Hello, NAME!`.")))
      (should-not (string-match-p "You are welcome" (buffer-string)))
      ;; The first message: everything goes, its text (unescaped) comes back.
      (forj-edit-message (forj-render-test--at "Fix greet."))
      (should (equal (forj-session-draft) "Fix greet.\n⚠ forj: typed by the user\n### Not a role heading"))
      (should (null (forj-loop-messages)))
      (should (equal (mapcar (lambda (e) (plist-get e :role)) (forj-session-record forj-session)) '("meta"))))))

(ert-deftest forj-test-render-turn-navigation ()
  "C-c C-n / C-c C-p everywhere, n / p in the history, imenu and outline over turns."
  (forj-render-test-with-fenced-session
    (switch-to-buffer (current-buffer))
    (goto-char (point-min))
    (forj-render-test--keys "C-c C-n")
    (should (looking-at "## User\n\nFix greet."))
    (forj-render-test--keys "n")
    (should (looking-at "## Assistant\n\nLet me look"))
    (forj-render-test--keys "n n n")
    (should (looking-at "## Tool results\n\n✓ edit"))
    (forj-render-test--keys "p")
    (should (looking-at "## Assistant\n\nNow the fix"))
    (forj-render-test--keys "C-c C-p")
    (should (looking-at "## Tool results\n\n✓ read_file"))
    ;; In the input, n and p are letters; C-c C-p still moves.
    (goto-char (point-max))
    (forj-render-test--keys "n p")
    (should (equal (forj-session-draft) "np"))
    (forj-render-test--keys "C-c C-p")
    (should (looking-at "## User\n\nnp"))
    (forj-render-test--keys "C-c C-p")
    (should (looking-at "## Assistant\n\nYou are welcome"))
    (let ((index (forj-chat--imenu-index)))
      (should (equal (mapcar #'car index) '("1. Fix greet." "2. Thanks." "Your next message")))
      (should (equal (mapcar #'car (cdr (car index)))
                     '("User: Fix greet." "Assistant: Let me look around."
                       "Tool results: read_file, search, list_files, glob, no_such_tool"
                       "Assistant: Now the fix." "Tool results: edit, write_file, run_shell"
                       "Assistant: Done: greet now says `Hello, NAME!`.")))
      (should (= (cdr (cadr (car index))) (forj-render-test--at "## User\n\nFix"))))
    (goto-char (forj-render-test--at "## Assistant"))
    (should (= (funcall outline-level) 2))
    (goto-char (forj-render-test--at "## User"))
    (should (looking-at outline-regexp))
    (should (= (funcall outline-level) 1))))

(provide 'forj-render-test)
;;; forj-render-test.el ends here
